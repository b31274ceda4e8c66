"""The Heads page's query–key view: the batch (the text and the model's samples), point counts per colour,
escaped hover text, and its options in the URL."""

import numpy as np
from attnlab.app.presets import presets
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, titled, widget

TEXT = "<b>x</b> & y"


def test_qk_view_over_the_text_and_the_samples():
    at = open_page("heads", model="random-decoder", text=TEXT)
    ok(at)
    lm = load("random-decoder")
    texts = [TEXT] + [p.text for p in presets("random-decoder")][:5]
    n = sum(len(lm.encode(t).tokens) for t in texts)
    fig = titled(at, "queries and keys of")
    assert f"of {len(texts)} inputs" in fig["layout"]["title"]["text"] and "blocks.1.attn, head 0" in \
        fig["layout"]["title"]["text"]
    queries, keys = fig["data"]
    assert queries["name"] == f"queries ({n})" and keys["name"] == f"keys ({n})"
    assert len(arr(queries["x"])) == len(arr(keys["y"])) == n
    assert queries["marker"]["color"] != keys["marker"]["color"]
    hover = queries["text"]
    assert hover[0] == "query · [BOS] (position 0)<br>your text"
    assert "query · &lt; (position 1)<br>your text" in hover and not any("<b>" in h for h in hover)
    assert any(h.endswith("<br>The cat and the mat") for h in hover)
    ex = fig["layout"]["meta"]["explained"]
    assert 0 < ex[1] <= ex[0] < 1 and "% of variance" in fig["layout"]["xaxis"]["title"]["text"]
    first = arr(queries["x"])

    at.selectbox(key="qk_site").set_value("blocks.0.attn").run()
    widget(at, "qk_head").set_value(3).run()
    at.toggle(key="qk_align").set_value(False).run()
    ok(at)
    assert at.query_params["qk_site"] == "blocks.0.attn" and at.query_params["qk_head"] == "3"
    assert at.query_params["qk_align"] == "0"
    fig = titled(at, "queries and keys of")
    assert "blocks.0.attn, head 3" in fig["layout"]["title"]["text"]
    assert len(arr(fig["data"][0]["x"])) == n and not np.allclose(arr(fig["data"][0]["x"]), first)


def test_qk_view_reads_a_bookmark_and_cross_attention():
    at = open_page("heads", model="random-encdec", text="le chat", src="the cat", qk_site="decoder.blocks.0.cross_attn",
                   qk_head=1)
    ok(at)
    fig = titled(at, "decoder.blocks.0.cross_attn, head 1")
    queries, keys = fig["data"]
    assert any("query · l (position 1)" in h for h in queries["text"])  # target tokens ask
    assert any("key · t (position 0)" in h for h in keys["text"])  # source tokens answer
