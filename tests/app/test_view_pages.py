"""The pages on a transformers view (a tiny random GPT-J and Pegasus, families attnlab does not convert): what
reads attention weights renders from transformers' own weights; what needs q/k, our backends, the cache or
interventions says so in one line."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import ok, open_page, specs, titled, z_of
from tests.view.fixtures import make_view_model

TEXT, SRC = "the cat sat on the mat", "a dog ran in the park"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewpages")
    return root, {f: make_view_model(f, root / f) for f in ("gptj", "pegasus")}


@pytest.fixture
def gptj(folders, monkeypatch):
    root, found = folders
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))
    return str(found["gptj"])


@pytest.fixture
def pegasus(folders, monkeypatch):
    root, found = folders
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))
    return str(found["pegasus"])


def _infos(at) -> str:
    return " ".join(i.value for i in at.info) + " " + " ".join(c.value for c in at.caption)


def test_heatmaps_show_every_head_of_the_view(gptj):
    import attnlab.model as model

    run = model.load(gptj).run(TEXT)
    at = open_page("heatmaps", model=gptj, text=TEXT)
    ok(at)
    fig = titled(at, "self-attention — attention weights")
    assert fig["layout"]["meta"]["heads"] == 4 and fig["layout"]["xaxis"]["ticktext"] == [f"head {h}" for h in range(4)]
    assert [o for o in at.selectbox(key="kind").options] == ["attention weights (softmax)"]  # weights only
    assert "Runs as: **transformers view** (gptj)" in [c.value for c in at.sidebar.caption]
    assert "neuron view reads q and k: it needs a converted family" in _infos(at)
    head = titled(at, "layer 1, head 0")  # the close-up: transformers' own weights of the last layer, head 0
    z = z_of(head["data"][0])
    np.testing.assert_allclose(np.nan_to_num(z), run.records["blocks.1.attn"].pattern(0), atol=1e-6)


def test_explore_rollout_and_heads_read_the_weights(gptj):
    import attnlab.model as model
    from attnlab.analysis.probes.head_table import head_table

    at = open_page(None, model=gptj, text=TEXT)
    ok(at)
    assert specs(at) and at.dataframe[0].value.shape == (5, 2)  # rows per layer and the top-5 prediction
    at.switch_page("../pages/rollout.py").run()
    ok(at)
    from attnlab.analysis.attention.rollout import attention_rollout

    fig = titled(at, "Which tokens matter")
    assert fig["data"][0]["y"] == ["last-layer attention", "rollout", "flow", "gradient relevance",
                                   "attention × gradient"]  # no hook_embed in a model read as it is
    assert any("without a hook on its input embeddings" in c.value for c in at.caption)
    lm = model.load(gptj)
    r = attention_rollout(lm.run(TEXT).matrices("self"), 0.5, "mean", 0.0)[-1]  # the last token's row
    row, keep = z_of(fig["data"][0])[1], np.arange(len(r)) != len(r) - 1  # scaled to its largest other weight
    np.testing.assert_allclose(row[keep] / row[keep].max(), r[keep] / r[keep].max(), atol=1e-6)
    assert "converted family" not in _infos(at)  # gradients flow through transformers' own weights
    at.switch_page("../pages/heads.py").run()
    ok(at)
    want, _ = head_table(lm, lm.encode(TEXT))
    got = at.dataframe[0].value.sort_values(["layer", "head"])
    np.testing.assert_allclose(got["entropy"].to_numpy(), want["entropy"].to_numpy(), atol=1e-9)
    info = _infos(at)
    assert "switches heads off inside the model: it needs a converted family" in info
    assert "plots each head's q and k vectors: it needs a converted family" in info


@pytest.mark.parametrize("page", ["kv_cache", "scores", "masks", "backends", "positions", "block", "generate",
                                  "lens", "patching"])
def test_pages_that_need_a_converted_family_say_so(gptj, page):
    at = open_page(page, model=gptj, text=TEXT)
    ok(at)
    (line,) = [i.value for i in at.info if "converted family" in i.value]
    assert "it needs a converted family (gpt2, bert" in line and "runs as a transformers view" in line
    assert not specs(at)


def test_cross_attention_of_an_unconverted_encoder_decoder(pegasus):
    import attnlab.model as model

    run = model.load(pegasus).run("the cat", SRC)
    at = open_page("cross_attention", model=pegasus, text="the cat", src=SRC)
    ok(at)
    mosaic = titled(at, "cross-attention: target tokens")
    assert mosaic["layout"]["meta"]["heads"] == 4
    cross = titled(at, "cross-attention, layer 1, mean of heads")
    want = run.records["decoder.blocks.1.cross_attn"].pattern().mean(0)  # [T, S]
    np.testing.assert_allclose(z_of(cross["data"][0]), want, atol=1e-6)
    assert "replay generates with our KV cache: it needs a converted family" in _infos(at)
