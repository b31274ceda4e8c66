"""The teaching pages among the mechanics pages (Step by step, Cross-attention, Positions, Generate) with
AppTest: main options, and figures checked by their data."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.app.figures.rows import COVER
from attnlab.model.registry import bundled_names

from tests.app.conftest import arr, ok, open_page, titled, z_of

TEXT = "abc def ghij"
ENCDEC = "lecture-encdec" if "lecture-encdec" in bundled_names() else "random-encdec"


# -- Step by step -----------------------------------------------------------------------------------------
def _texts(fig) -> np.ndarray:
    return np.array(fig["data"][0]["text"])


def test_step_by_step_lecture_example_and_quiz():
    at = open_page("step_by_step")
    ok(at)
    w = _texts(titled(at, "④ Softmax"))
    assert w.shape == (4, 4) and w[1, 1] == "0.500" and w[1, 0] == "0.500" and (w[0, 1:] == "0.000").all()
    masked = titled(at, "③ Masked")
    assert masked["data"][1]["text"].count("−∞") == 6  # above the causal diagonal
    at.toggle(key="sbs_quiz").set_value(True).run()
    ok(at)
    assert _texts(titled(at, "④ Softmax"))[1, 1] == "?"  # hidden until answered
    assert at.query_params["sbs_ask"] == "2,2"
    at.number_input(key="sbs_answer").set_value(0.4).run()
    assert at.error and "α_2,2 = 0.500" in at.error[0].value
    assert any("exp values" in m.value and "**0.500**" in m.value for m in at.markdown)
    at.number_input(key="sbs_answer").set_value(0.5).run()
    ok(at)
    assert at.success[0].value == "Correct: α_2,2 = 0.500."
    at.button[1].click().run()  # another question: a new cell, the answer cleared
    ok(at)
    assert at.query_params["sbs_ask"] != "2,2" and at.number_input(key="sbs_answer").value is None


def test_step_by_step_url_matrix_mask_and_multi_head():
    scores = "0,1,2;2,1,0;1,1,1"
    at = open_page("step_by_step", sbs_T=3, sbs_scores=scores, sbs_mask="none", sbs_v="1,0;0,1;1,1", sbs_dk=4)
    ok(at)
    s = np.array([[0, 1, 2], [2, 1, 0], [1, 1, 1]], float) / 2  # d_k = 4: × 1/2
    e = np.exp(s - s.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    assert np.allclose(_texts(titled(at, "④ Softmax")).astype(float), want, atol=5e-4)
    assert at.query_params["sbs_scores"] == scores
    at = open_page("step_by_step", sbs_mode="qkv", sbs_heads=2, sbs_mask="padding")
    ok(at)
    heads = [titled(at, f"head {h}: α") for h in (1, 2)]
    for f in heads:
        w = _texts(f).astype(float)
        assert w.shape == (4, 4) and np.allclose(w[:, 3], 0) and np.allclose(w.sum(1), 1, atol=0.02)  # 2 decimals
    assert _texts(titled(at, "Concatenated heads")).shape == (4, 4)
    assert "d_head" in " ".join(h.value for h in at.subheader)
    assert "× 0.707" in titled(at, "② Scaled")["layout"]["title"]["text"]  # 1/√2 per head


# -- Cross-attention --------------------------------------------------------------------------------------
def test_cross_attention_matrices_and_replay():
    at = open_page("cross_attention", model=ENCDEC, x_head=1, x_n=4, x_step=2)
    ok(at)
    from attnlab.model.registry import load

    lm = load(ENCDEC)
    src, tgt = at.session_state["src"], at.session_state["text"]
    enc = lm.encode(tgt, src)
    S, T = len(enc.src_tokens), len(enc.tokens)
    cross = titled(at, "cross-attention, layer")
    assert z_of(cross["data"][0]).shape == (T, S) and "head 1" in cross["layout"]["title"]["text"]
    assert cross["layout"]["xaxis"]["title"]["text"] == "source token (key)"
    self_ = z_of(titled(at, "decoder self-attention")["data"][0])
    assert self_.shape == (T, T) and np.isnan(self_[np.triu_indices(T, 1)]).all()
    mosaic = titled(at, "cross-attention: target tokens")
    assert mosaic["layout"]["meta"]["heads"] == lm.cfg.n_heads
    replay = titled(at, "all steps: source tokens read")
    n = replay["layout"]["meta"]["steps"]
    assert 1 <= n <= 4 and replay["layout"]["meta"]["keys"] == S and len(replay.get("frames", [])) in (0, n)
    assert z_of(titled(at, "step 2: cross-attention")["data"][0]).shape == (lm.cfg.n_heads + 1, S)


def test_cross_attention_uses_its_own_encoder_decoder_and_keeps_the_sessions_decoder():
    at = open_page("cross_attention", model="random-decoder")
    ok(at)
    assert at.query_params["model"] == at.session_state["model"] == "random-decoder"
    assert any("this page alone uses **lecture-encdec**" in i.value for i in at.info)
    assert titled(at, "cross-attention, layer")["data"][0]["x"]  # drawn from the encoder–decoder


# -- Positions --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "rope", "alibi"])
def test_positions_schemes(scheme):
    at = open_page("positions", model="random-decoder", pos_scheme=scheme, pos_n=16, pos_model="minilm")
    ok(at)
    if scheme == "sinusoidal":
        assert z_of(titled(at, "PE [16 positions × 64 dims]")["data"][0]).shape == (16, 64)
    elif scheme == "learned":
        fig = titled(at, "minilm: position embeddings")  # a trained BERT-style table
        assert z_of(fig["data"][0]).shape == (16, 384)
        assert "no vector for position 512" in " ".join(c.value for c in at.caption)
        sim = z_of(titled(at, "cosine similarity between positions")["data"][0])
        assert sim[5, 6] > sim[5, 15]  # trained: neighbours are more alike than distant positions
    elif scheme == "rope":
        spread = {t["name"]: arr(t["y"]) for t in titled(at, "Spread of the scores")["data"]}
        assert spread["RoPE"].max() < 1e-4 and spread["absolute (sinusoidal added)"].max() > 1e-2
        S = z_of(titled(at, "RoPE: rot")["data"][0])
        assert np.allclose(np.diagonal(S, -3), np.diagonal(S, -3)[0], atol=1e-4)  # constant along a diagonal
    else:
        fig = titled(at, "ALiBi bias per head")
        assert fig["layout"]["meta"]["heads"] == 4
        assert at.dataframe[0].value["slope m_h"].tolist() == pytest.approx([0.25, 0.0625, 0.015625, 0.00390625])
    assert at.query_params["pos_scheme"] == scheme


@pytest.mark.parametrize("model", sorted({ENCDEC, "random-decoder"}))
def test_positions_default_is_the_model_in_use(model):
    from attnlab.model.registry import load

    cfg = load(model).cfg
    at = open_page("positions", model=model)
    ok(at)
    assert at.query_params["pos_scheme"] == (cfg.positional if cfg.positional != "none" else "sinusoidal")
    if cfg.positional == "sinusoidal":
        assert any("adds exactly this table" in s.value for s in at.success)
    elif cfg.positional == "learned":  # the model's own table, first
        assert at.query_params["pos_model"] == model
        fig = titled(at, f"{model}: position embeddings")
        assert z_of(fig["data"][0]).shape == (min(48, cfg.max_len), cfg.d_model)


# -- Generate ---------------------------------------------------------------------------------------------
def test_generate_greedy_replay_and_step():
    at = open_page("generate", model="random-decoder", text=TEXT, gen_n=6, gen_step=2, gen_head=0)
    ok(at)
    T0 = len(TEXT) + 1
    fig = titled(at, "Each new token's attention")
    z = z_of(fig["data"][0])
    assert z.shape == (6, T0 + 5) and len(fig["frames"]) == 6
    # ▶ replay frames carry no copy of the matrix: each covers the rows not yet written
    assert all(not f.get("data") for f in fig["frames"])
    covers = [[sh for sh in f["layout"]["shapes"] if sh.get("fillcolor") == COVER] for f in fig["frames"]]
    assert [c[0]["y0"] for c in covers[:-1]] == [s + 0.5 for s in range(5)] and covers[-1] == []
    for s in range(6):  # step s sees keys 0..T0+s−1, rows sum to 1
        assert np.isnan(z[s, T0 + s:]).all() and np.nansum(z[s]) == pytest.approx(1, abs=1e-4)
    assert fig["layout"]["yaxis"]["ticktext"][0].startswith("0 →")
    step = z_of(titled(at, "query ")["data"][0])
    assert step.shape == (4 + 1, T0 + 2)  # heads + mean, keys up to the step's query
    assert "greedy" in " ".join(m.value for m in at.markdown)
    probs = at.dataframe[0].value["probability"]
    assert len(probs) == 5 and (np.diff(probs) <= 1e-7).all()


def test_generate_sampling_is_seeded_and_bookmarkable():
    params = dict(model="random-decoder", text=TEXT, gen_n=5, gen_temp=1.2, gen_topk=3, gen_seed=4)
    a, b = open_page("generate", **params), open_page("generate", **params)
    ok(a)
    strip = [h.proto.body for h in a.get("html") if 'class="strip"' in h.proto.body][0]
    assert strip == [h.proto.body for h in b.get("html") if 'class="strip"' in h.proto.body][0]
    assert a.dataframe[0].value["probability"].iloc[3:].sum() == pytest.approx(0)  # top-3: the rest is 0
    assert "sampled at temperature 1.2, top-3, seed 4" in " ".join(m.value for m in a.markdown)
    assert {k: a.query_params[k] for k in ("gen_temp", "gen_topk", "gen_seed")} == {
        "gen_temp": "1.2", "gen_topk": "3", "gen_seed": "4"}


def test_generate_encoder_decoder_cross_attention():
    at = open_page("generate", model="random-encdec", text="", src="the cat", gen_n=3, gen_group="cross")
    ok(at)
    fig = titled(at, "Each new token's attention")
    assert fig["layout"]["xaxis"]["title"]["text"] == "source token (key)"
    assert z_of(fig["data"][0]).shape[1] == len("the cat") + 1


@pytest.mark.parametrize("model", ["lecture-decoder", "minilm"])
def test_score_scales_says_what_dropping_the_scale_does_to_this_head(model):
    """The caption's saturation claim is this head's measurement (minilm layer 0 head 0: 0 % → 19 % of rows over 0.9,
    where the page said "nearly all weight on one key"), the same numbers as the metrics beside it."""
    at = open_page("scores", model=model)
    ok(at)
    with_, without = (m.proto.body for m in at.get("metric"))
    cap = next(c.value for c in at.caption if c.value.startswith("d_k = "))
    assert f"from {with_} to {without} (mean row entropy " in cap and "nearly all weight" not in cap


@pytest.mark.parametrize("model", ["lecture-decoder", "minilm"])
def test_masks_zeroing_after_the_softmax_uses_the_mask_that_hides_keys(model):
    """A decoder's comparison mask B is bidirectional and hides nothing: the page said "rows that sum to less than 1
    (here as low as 1.000)"; it shows the causal mask's row sums, whichever of A and B it is."""
    import json
    import re

    at = open_page("masks", model=model)
    ok(at)
    said = next(m.value for m in at.markdown if "eroing masked weights" in m.value)
    low = float(re.search(r"as low as \*\*([0-9.]+)\*\*", said).group(1))
    assert 0 < low < 0.99 and said.startswith("With the causal mask, zeroing")
    bars = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if "Row sums" in json.dumps(json.loads(c.proto.spec)["layout"].get("title", {})))
    assert "(causal mask)" in bars["layout"]["title"]["text"]
    assert min(v for t in bars["data"] for v in arr(t["y" if t.get("orientation") != "h" else "x"])) == \
        pytest.approx(low, abs=1e-3)
