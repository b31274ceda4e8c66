"""The Block page's numbers: the step-by-step walk reproduces the model's logits, its norms are the model's,
and the random-weight variants (shared weights, BatchNorm's leak, QK-norm's score scale) are what they say."""

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.block_walk import block_walk, sampling_probs, walk_stream
from attnlab.analysis.machinery.norm_variants import (
    BATCHNORM,
    SeqBatchNorm,
    build_variants,
    compare_variants,
    norm_leak,
)
from attnlab.model import ModelConfig, build_model
from attnlab.model.registry import bundled_names, load

TEXT = "The cat sat on the mat."
MODELS = ["random-decoder"] + (["lecture-decoder"] if "lecture-decoder" in bundled_names() else [])


@pytest.fixture(scope="module", params=MODELS)
def lm(request):
    return load(request.param)


def test_walk_reproduces_the_models_logits(lm):
    inp = lm.encode(TEXT)
    w = block_walk(lm, inp, -1)
    assert w.max_abs_vs_model <= 1e-5
    ref = lm.forward(inp).logits[0, -1].double().numpy()  # [V]
    assert np.abs(w.logits - ref).max() <= 1e-5
    assert w.top_ids[0] == int(ref.argmax())


@pytest.mark.parametrize("change", [
    {"norm": "post"}, {"norm": "peri"}, {"norm_type": "rmsnorm"}, {"mlp": "swiglu"}, {"qk_norm": True},
    {"positional": "rope"}, {"positional": "alibi"}, {"positional": "sinusoidal"}, {"sliding_window": 3},
    {"norm": "parallel", "positional": "rope", "rotary_dim": 8}, {"mlp": "geglu", "embed_scale": 8.0},
    {"sliding_window": 3, "sliding_layers": (1,), "attn_softcap": 0.5, "logit_softcap": 2.0, "norm": "peri"},
    {"head_dim": 24, "attn_scale": 0.2, "mlp": "relu", "lm_head_bias": True},
])
def test_walk_stream_equals_the_forward_for_every_variant(change):
    torch.manual_seed(1)
    net = build_model(ModelConfig(n_layers=2, **change)).eval()
    ids = torch.randint(0, 260, (1, 9))
    with torch.no_grad():
        walked, steps = walk_stream(net, ids, 4)
        assert (walked - net(ids).logits).abs().max() <= 1e-5
    assert len(steps) == 2 + 2 * {"post": 4, "parallel": 5}.get(change.get("norm"), 6) + 1


def test_residual_norms_are_the_models_own_vectors():
    lm = load("random-decoder")  # learned positions, pre-LN
    inp = lm.encode(TEXT)
    t = 3
    w = block_walk(lm, inp, t)
    emb = lm.model.embed
    h0 = (emb.tok.weight[inp.ids[0, t]] + emb.pos.weight[t]).double().detach().numpy()  # [D]
    assert w.resid_norms[0] == pytest.approx(np.linalg.norm(h0), rel=1e-6)
    by = {(s.layer, s.name): s.vector for s in w.steps}
    # pre-LN: each residual add is exactly the stream plus what the sub-layer returned
    assert np.allclose(by[(0, "residual after attention")], h0 + by[(0, "attention output")], atol=1e-6)
    assert np.allclose(by[(0, "residual after MLP")], by[(0, "residual after attention")] + by[(0, "MLP output")],
                       atol=1e-6)
    assert w.attn_delta[0] == pytest.approx(np.linalg.norm(by[(0, "attention output")]))
    assert w.resid_norms[-1] == pytest.approx(np.linalg.norm(by[(lm.cfg.n_layers - 1, "residual after MLP")]))
    # LayerNorm before attention (unit weights, zero biases at random init): mean 0, std √(var / (var + eps))
    x = by[(0, "norm before attention")]
    want = np.sqrt(h0.var() / (h0.var() + lm.cfg.norm_eps))
    assert abs(x.mean()) < 1e-6 and x.std() == pytest.approx(want, rel=1e-5) and want < 0.995
    assert w.tokens == list(inp.tokens) and w.position == t


def test_sampling_probs_follow_temperature_and_top_k():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 0.0])
    plain = np.exp(logits) / np.exp(logits).sum()
    assert np.allclose(sampling_probs(logits, 0.0, 3), plain)  # greedy: the plain softmax, top-k unused
    hot = sampling_probs(logits, 2.0, None)
    assert np.allclose(hot, np.exp(logits / 2) / np.exp(logits / 2).sum())
    top3 = sampling_probs(logits, 1.0, 3)
    assert (top3 > 0).sum() == 3 and top3[3] == 0 and top3[4] == 0 and top3.sum() == pytest.approx(1)
    lm = load("random-decoder")
    w = block_walk(lm, lm.encode(TEXT), -1, temperature=0.7, top_k=4)
    assert (w.top_probs > 0).sum() == 4 and w.top_probs.sum() == pytest.approx(1)


def test_variants_share_weights_where_shapes_match():
    models, shared = build_variants("residual", 260, 10, seed=3)
    pre, post, peri = (models[k].state_dict() for k in ("pre-LN", "post-LN", "peri-LN"))
    for other in (post, peri):
        common = [k for k in pre if k in other]
        assert len(common) > 30 and all(torch.equal(pre[k], other[k]) for k in common)
    assert shared["pre-LN"][0] == shared["pre-LN"][1]
    models, shared = build_variants("mlp", 260, 10, seed=3)
    assert models["SwiGLU (hidden 8D/3)"].blocks[0].mlp.up.out_features == int(8 * 64 / 3)
    assert shared["SwiGLU (hidden 8D/3)"][0] < shared["SwiGLU (hidden 8D/3)"][1]  # the MLP's shapes differ
    again, _ = build_variants("mlp", 260, 10, seed=3)
    assert torch.equal(again["GELU (hidden 4D)"].blocks[1].mlp.up.weight, models["GELU (hidden 4D)"].blocks[1].mlp.up.weight)
    norms, _ = build_variants("norm", 260, 10, seed=0)
    bn = [m for m in norms[BATCHNORM].modules() if isinstance(m, SeqBatchNorm)]
    assert len(bn) == 2 * 4 + 1 and not any(isinstance(m, torch.nn.LayerNorm) for m in norms[BATCHNORM].modules())


def test_seq_batchnorm_normalises_each_feature_over_the_sequence():
    ln = torch.nn.LayerNorm(6)
    x = torch.randn(1, 9, 6) * 3 + 2
    y = SeqBatchNorm(ln)(x)
    assert torch.allclose(y.mean(dim=(0, 1)), torch.zeros(6), atol=1e-5)
    assert torch.allclose(y.var(dim=(0, 1), unbiased=False), torch.ones(6), atol=1e-4)


def test_batchnorm_leaks_a_later_token_and_per_token_norms_do_not(lm):
    inp = lm.encode(TEXT)
    T = inp.ids.shape[1]
    leak = norm_leak(lm, inp, changed=T - 2, seed=0)
    c = leak.changed
    assert c == T - 2 and leak.tokens == list(inp.tokens)
    for name in ("LayerNorm", "RMSNorm"):
        assert (leak.delta[name][:c] == 0).all()  # exactly: earlier tokens never see the change
        assert leak.delta[name][c] > 0
    assert (leak.delta[BATCHNORM][:c] > 1e-4).all()  # every earlier token moves
    other = norm_leak(lm, inp, changed=-1, new_id=int(inp.ids[0, 1]), seed=0)
    assert other.new_token == inp.tokens[1] and (other.delta["LayerNorm"][: T - 1] == 0).all()
    with pytest.raises(ValueError, match="vocabulary"):
        norm_leak(lm, inp, changed=-1, new_id=lm.cfg.vocab_size)


def test_compare_variants_real_numbers(lm):
    inp = lm.encode(TEXT)
    qk = {v.name: v for v in compare_variants(lm, inp, "qk", -1, seed=0)}
    off, on = qk["QK-norm off"], qk["QK-norm on"]
    assert (on.score_std > 10 * off.score_std).all() and (on.score_max > off.score_max).all()
    assert off.resid_norms.shape == (5,) and off.attn_delta.shape == (4,)
    res = {v.name: v for v in compare_variants(lm, inp, "residual", -1, seed=0)}
    # post-LN renormalises the stream after every add: ‖h‖ = √D (unit LayerNorm weights, zero biases)
    assert np.allclose(res["post-LN"].resid_norms[1:], np.sqrt(64), rtol=1e-4)
    assert res["pre-LN"].resid_norms[0] == res["peri-LN"].resid_norms[0]  # same embeddings
    mlp = {v.name: v for v in compare_variants(lm, inp, "mlp", -1, seed=0)}
    d, h = 64, int(8 * 64 / 3)
    assert mlp["SwiGLU (hidden 8D/3)"].mlp_params == 3 * d * h + 2 * h + d
    assert mlp["GELU (hidden 4D)"].mlp_params == 2 * d * 4 * d + 4 * d + d
    with pytest.raises(ValueError, match="unknown comparison"):
        compare_variants(lm, inp, "nope")
