"""The Heads page's "Why does this head attend here?": the matrix is the analysis' numbers (query-side × key-side
parts of the largest terms), integer axes with the parts as tick labels, a diverging scale centred at 0, escaped
tokens, the frozen-scale sentence and the residual, its choices in the URL."""

import json

import numpy as np
import pytest
from attnlab.analysis.probes.qk_attribution import qk_attribution
from attnlab.model.registry import load

from attnlab.data import data_folder
from tests.app.conftest import arr, ok, open_page, titled, widget, z_of

STORY = json.loads((data_folder("sample_texts") / "lecture.json").read_text())["samples"][0]["text"]


def caption(at, text: str) -> str:
    found = [c.value for c in at.caption if text in c.value]
    assert len(found) == 1, [c.value for c in at.caption]
    return found[0]


def test_why_the_answer_head_attends_to_the_answer():
    at = open_page("heads", model="lecture-decoder", text=STORY, why_site="blocks.3.attn", why_head=2)
    ok(at)
    lm = load("lecture-decoder")
    a = qk_attribution(lm, lm.encode(STORY), 3, 2, 63, None)  # the page's defaults: the last row, its argmax key
    assert a.key == 25 and a.tokens[a.key] == "48"
    qs, ks, m = a.top_matrix(12)
    fig = titled(at, "blocks.3.attn, head 2: is (63) → 48 (25)")
    assert f"score {a.score:.3f}" in fig["layout"]["title"]["text"]
    trace = fig["data"][0]
    np.testing.assert_allclose(z_of(trace), m, rtol=0, atol=1e-9)
    assert trace["zmin"] == -trace["zmax"] == pytest.approx(-np.abs(m).max())  # centred at 0
    assert arr(fig["layout"]["xaxis"]["tickvals"]).tolist() == list(range(len(ks))) and fig["layout"]["xaxis"]["ticktext"] == ks
    assert arr(fig["layout"]["yaxis"]["tickvals"]).tolist() == list(range(len(qs))) and fig["layout"]["yaxis"]["ticktext"] == qs
    assert trace["customdata"][0][0] == [qs[0], ks[0]]
    text = caption(at, "Frozen scale")
    assert f"all {len(a.terms())} terms sum to {a.total:.4f}" in text and f"residual {a.residual:.1e}" in text
    assert "frozen at the actual residual of each position" in text

    at.selectbox(key="why_key").set_value(10).run()  # '46': john's age, the wrong friend
    widget(at, "why_head").set_value(1).run()
    ok(at)
    assert at.query_params["why_key"] == "10" and at.query_params["why_head"] == "1"
    b = qk_attribution(lm, lm.encode(STORY), 3, 1, 63, 10)
    fig = titled(at, "blocks.3.attn, head 1: is (63) → 46 (10)")
    np.testing.assert_allclose(z_of(fig["data"][0]), b.top_matrix(12)[2], rtol=0, atol=1e-9)


def test_tokens_are_escaped_and_a_masked_key_is_said():
    at = open_page("heads", model="random-decoder", text="<b>x</b> & y", why_site="blocks.0.attn", why_query=1,
                   why_key=5)
    ok(at)
    lm = load("random-decoder")
    toks = lm.encode("<b>x</b> & y").tokens
    fig = titled(at, "blocks.0.attn, head 0: ")
    title = fig["layout"]["title"]["text"]
    assert f"{toks[1].replace('<', '&lt;')} (1) → {toks[5].replace('<', '&lt;').replace('>', '&gt;')} (5)" in title
    assert "<b>" not in title
    assert "is masked for this query" in caption(at, "Frozen scale")


def test_a_view_model_says_what_it_lacks(tmp_path, monkeypatch):
    from tests.view.fixtures import make_view_model

    folder = make_view_model("falcon", tmp_path / "falcon")
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(tmp_path))
    at = open_page("heads", model=str(folder), text="the cat sat")
    assert not at.exception
    assert any("splits a head's scores" in c.value for c in at.caption)


def test_an_encoder_decoder_gets_one_line():
    at = open_page("heads", model="random-encdec", text="le chat", src="the cat")
    ok(at)
    assert any("QK attribution covers one self-attention stack" in c.value and "encoder–decoder" in c.value
               for c in at.caption)


def test_the_notebook_draws_the_same_matrix():
    from attnlab.app.notebook import why_attend

    lm = load("lecture-decoder")
    fig = why_attend(lm, STORY, layer=3, head=2)
    qs, ks, m = qk_attribution(lm, lm.encode(STORY), 3, 2, 63).top_matrix(12)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), m, rtol=0, atol=0)
    assert list(fig.layout.yaxis.ticktext) == qs and list(fig.layout.xaxis.ticktext) == ks
    assert fig.layout.title.text.startswith("blocks.3.attn, head 2: is (63) → 48 (25), score 26.062")
