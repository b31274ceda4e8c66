"""The Block page (/block) with AppTest: the defaults, each option, and figures checked against the walk's
numbers computed here from the model."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.machinery.block_walk import block_walk
from attnlab.analysis.machinery.norm_variants import compare_variants, norm_leak
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, titled

MODEL = "random-decoder"
TEXT = "abc abd"


@pytest.fixture(scope="module")
def lm():
    return load(MODEL)


def test_defaults_walk_the_last_token_with_the_models_numbers():
    at = open_page("block")
    ok(at)
    model, text = at.session_state["model"], at.session_state["text"]
    lm = load(model)
    inp = lm.encode(text)
    w = block_walk(lm, inp, -1, 1.0, None)
    fig = titled(at, "Residual stream ‖h‖")
    bars = {tr["name"]: arr(tr["y"]) for tr in fig["data"]}
    assert np.allclose(bars["‖residual stream h_l‖"], w.resid_norms, rtol=1e-6)
    assert np.allclose(bars["‖attention update‖"], w.attn_delta, rtol=1e-6)
    assert np.allclose(bars["‖MLP update‖"], w.mlp_delta, rtol=1e-6)
    ticks = fig["layout"]["xaxis"]["ticktext"]
    assert ticks[0] == "h₀ embed" and len(ticks) == lm.cfg.n_layers + 1
    assert any("forward pass: max |Δ| = " in c.value for c in at.caption)
    stages, preds = at.dataframe[0].value, at.dataframe[1].value
    assert list(stages["stage"])[-1].startswith("final norm") and len(stages) == len(w.steps)
    assert np.allclose(stages["‖x‖"], [s.norm for s in w.steps], rtol=1e-6)
    assert list(preds["token"]) == w.top_tokens and np.allclose(preds["probability"], w.top_probs, rtol=1e-6)
    vec = titled(at, "The token's vector at every stage")
    assert vec["layout"]["meta"]["shape"] == [len(w.steps), min(32, lm.cfg.d_model)]
    assert f"token {len(inp.tokens) - 1}" in " ".join(h.value for h in at.subheader)
    comp = titled(at, "‖h‖ at the chosen token")
    assert [tr["name"] for tr in comp["data"]] == ["pre-LN", "post-LN", "peri-LN"]
    assert any("Random-weight decoders" in i.value for i in at.info)
    assert at.query_params["blk_cmp"] == "residual" and at.query_params["blk_seed"] == "0"
    assert len(at.get("download_button")) == 3


def test_token_temperature_and_top_k(lm):
    at = open_page("block", model=MODEL, text=TEXT, query=2, blk_temp=0.5, blk_topk=3)
    ok(at)
    w = block_walk(lm, lm.encode(TEXT), 2, 0.5, 3)
    preds = at.dataframe[1].value
    assert (preds["probability"] > 0).sum() == 3 and np.allclose(preds["probability"], w.top_probs, rtol=1e-6)
    assert "token 2" in " ".join(h.value for h in at.subheader)
    bars = {tr["name"]: arr(tr["y"]) for tr in titled(at, "Residual stream ‖h‖")["data"]}
    assert np.allclose(bars["‖residual stream h_l‖"], w.resid_norms, rtol=1e-6)
    assert any("softmax(logits / 0.5) over the top 3" in m.value for m in at.markdown)
    at = open_page("block", model=MODEL, text=TEXT, blk_temp=0.0)
    ok(at)
    assert any("greedy (temperature 0)" in m.value for m in at.markdown)


def test_residual_and_mlp_comparisons(lm):
    inp = lm.encode(TEXT)
    at = open_page("block", model=MODEL, text=TEXT, blk_cmp="mlp", blk_seed=2)
    ok(at)
    vs = compare_variants(lm, inp, "mlp", -1, 2)
    fig = titled(at, "‖MLP update‖ per block")
    for tr, v in zip(fig["data"], vs):
        assert tr["name"] == v.name and np.allclose(arr(tr["y"]), v.mlp_delta, rtol=1e-6)
    table = at.dataframe[2].value
    assert list(table["MLP parameters"]) == [v.mlp_params for v in vs]
    at = open_page("block", model=MODEL, text=TEXT, blk_cmp="residual")
    ok(at)
    vs = compare_variants(lm, inp, "residual", -1, 0)
    fig = titled(at, "‖h‖ at the chosen token")
    assert np.allclose(arr(fig["data"][1]["y"]), vs[1].resid_norms, rtol=1e-6)  # post-LN: √D after each block
    assert titled(at, "‖attention update‖ per block")["layout"]["xaxis"]["ticktext"][0] == "block 0"


def test_qk_norm_comparison_shows_the_score_scale(lm):
    at = open_page("block", model=MODEL, text=TEXT, blk_cmp="qk")
    ok(at)
    std = {tr["name"]: arr(tr["y"]) for tr in titled(at, "Std of the scaled scores")["data"]}
    mx = {tr["name"]: arr(tr["y"]) for tr in titled(at, "Max |scaled score|")["data"]}
    want = {v.name: v for v in compare_variants(lm, lm.encode(TEXT), "qk", -1, 0)}
    for name, v in want.items():
        assert np.allclose(std[name], v.score_std, rtol=1e-6) and np.allclose(mx[name], v.score_max, rtol=1e-6)
    assert (std["QK-norm on"] > 10 * std["QK-norm off"]).all()


def test_batchnorm_leak_is_live_and_per_token_norms_give_exact_zero(lm):
    inp = lm.encode(TEXT)
    T = len(inp.tokens)
    at = open_page("block", model=MODEL, text=TEXT, blk_cmp="norm", blk_change=3)
    ok(at)
    leak = norm_leak(lm, inp, 3, int(inp.ids[0, 0]) if int(inp.ids[0, 0]) != int(inp.ids[0, 3]) else None, 0)
    fig = titled(at, "Change token 3")
    bars = {tr["name"]: arr(tr["y"]) for tr in fig["data"]}
    assert set(bars) == {"LayerNorm", "RMSNorm", "BatchNorm"}
    for name in bars:
        assert np.allclose(bars[name], leak.delta[name], rtol=1e-6) and len(bars[name]) == T
    assert (bars["LayerNorm"][:3] == 0).all() and (bars["RMSNorm"][:3] == 0).all()
    assert (bars["BatchNorm"][:3] > 0).all()
    line = next(m.value for m in at.markdown if "max |Δ| before token 3" in m.value)
    assert "**LayerNorm**: max |Δ| before token 3 = 0 (exactly)" in line
    assert "**RMSNorm**: max |Δ| before token 3 = 0 (exactly)" in line and "**BatchNorm**: max |Δ| before token 3 = 0 (" not in line
    # a later change, to another token of the text: the view follows the widgets
    at.selectbox(key="blk_change").set_value(T - 1).run()
    ok(at)
    at.selectbox(key="blk_new").set_value(-1).run()
    ok(at)
    other = norm_leak(lm, inp, T - 1, None, 0)
    bars = {tr["name"]: arr(tr["y"]) for tr in titled(at, f"Change token {T - 1}")["data"]}
    assert np.allclose(bars["BatchNorm"], other.delta["BatchNorm"], rtol=1e-6)
    assert (bars["LayerNorm"][: T - 1] == 0).all()
    assert at.query_params["blk_change"] == str(T - 1) and at.query_params["blk_new"] == "-1"



def test_the_shortest_text_still_leaks_under_batchnorm_only():
    at = open_page("block", model=MODEL, text="a", blk_cmp="norm")  # [BOS] a: token 1 changes, [BOS] watches
    ok(at)
    bars = {tr["name"]: arr(tr["y"]) for tr in titled(at, "Change token 1")["data"]}
    assert bars["LayerNorm"][0] == 0 and bars["RMSNorm"][0] == 0 and bars["BatchNorm"][0] > 0
    assert titled(at, "Residual stream ‖h‖")["layout"]["meta"]["layers"] == 2


def test_an_encoder_runs_a_decoder_for_this_page_only():
    at = open_page("block", model="random-encoder")
    ok(at)
    assert any("walks a decoder's own path" in i.value for i in at.info)
    assert titled(at, "Residual stream ‖h‖")
    assert at.session_state["model"] == "random-encoder"  # the session keeps its model for the other pages
