"""Grouped-query and multi-query attention: config checks, shapes of weights, hooks, cache and records,
and GQA ≡ MHA whose k/v weights are repeated per query group."""

import numpy as np
import pytest
import torch
from attnlab.model.cache import KVCache
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import capture
from attnlab.model.masks import MaskSpec
from attnlab.model.record import AttentionRecord

from tests.model.helpers import tiny, tokens


@pytest.mark.parametrize("n_kv", [0, 3, 5, -1])
def test_n_kv_heads_must_divide_n_heads(n_kv):
    with pytest.raises(ValueError, match=f"n_kv_heads={n_kv} must be ≥ 1 and divide n_heads=4"):
        ModelConfig(n_heads=4, n_kv_heads=n_kv)


def test_config_defaults_and_options():
    cfg = ModelConfig(n_heads=4)
    assert cfg.kv_heads == 4 and cfg.attn_bias is True
    cfg = ModelConfig(n_heads=4, n_kv_heads=1, bias=False, qkv_bias=True, sliding_window=3)
    assert (cfg.kv_heads, cfg.attn_bias, cfg.sliding_window) == (1, True, 3)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="sliding_window"):
        ModelConfig(arch="encoder", sliding_window=3)
    with pytest.raises(ValueError, match="sliding_window"):
        ModelConfig(sliding_window=0)


def test_weight_shapes_and_qkv_only_bias():
    m = tiny(n_heads=4, n_kv_heads=2, bias=False, qkv_bias=True)  # d_model 32, d_head 8
    attn = m.blocks[0].attn
    assert attn.qkv.weight.shape == (32 + 2 * 16, 32) and attn.qkv.bias.shape == (64,)
    assert attn.out.bias is None and m.blocks[0].mlp.up.bias is None
    cross = tiny("encdec", n_kv_heads=1).decoder.blocks[0].cross_attn
    assert cross.q.weight.shape == (32, 32) and cross.kv.weight.shape == (2 * 8, 32)


@pytest.mark.parametrize("n_kv", [4, 2, 1], ids=lambda n: f"kv{n}")
def test_hooks_cache_and_record_hold_kv_heads(n_kv):
    m = tiny(positional="rope", n_kv_heads=n_kv)
    x = tokens(7)
    cache = KVCache()
    with capture(names="blocks.0.attn.hook_*") as cap:
        m(x, cache=cache)
    t = cap.tensors
    assert t["blocks.0.attn.hook_q"][0].shape == (1, 7, 4, 8)  # TransformerLens: [batch, pos, head, d_head]
    assert t["blocks.0.attn.hook_k"][0].shape == t["blocks.0.attn.hook_v"][0].shape == (1, 7, n_kv, 8)
    assert t["blocks.0.attn.hook_pattern"][0].shape == (1, 4, 7, 7)
    assert cache.self_kv["blocks.0.attn"][0].shape == (1, n_kv, 7, 8)
    rec = cap["blocks.0.attn"]
    assert rec.pattern().shape == (4, 7, 7) and rec.k.shape == (1, n_kv, 7, 8)
    group = 4 // n_kv
    for h in range(4):
        assert rec.kv_head(h) == h // group
        np.testing.assert_array_equal(rec.keys(h)[0], rec.k[0, h // group])
    assert rec.keys().shape == (4, 7, 8) and rec.keys([1, 3], k0=2, k1=5).shape == (2, 3, 8)


def _as_mha(gqa, n_kv):
    """The MHA model whose k and v rows repeat each k/v head of `gqa` for its query group."""
    mha = tiny(**{**{k: v for k, v in gqa.cfg.to_dict().items() if k != "n_kv_heads"}, "n_kv_heads": None})
    state = dict(gqa.state_dict())
    D, dh, H = gqa.cfg.d_model, gqa.cfg.d_head, gqa.cfg.n_heads
    for key in [k for k in state if k.endswith(("attn.qkv.weight", "attn.qkv.bias"))]:
        w = state[key]
        q, k, v = w.split((D, n_kv * dh, n_kv * dh))
        # [Hkv·d, ...] -> [Hkv, d, ...] -> repeat each head H/Hkv times -> [H·d, ...]
        k, v = (t.reshape(n_kv, dh, *t.shape[1:]).repeat_interleave(H // n_kv, 0).reshape(D, *t.shape[1:])
                for t in (k, v))
        state[key] = torch.cat([q, k, v])
    mha.load_state_dict(state)
    return mha.eval()


@pytest.mark.parametrize("n_kv", [2, 1], ids=["gqa", "mqa"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_gqa_equals_mha_with_repeated_kv(n_kv, backend):
    gqa = tiny(positional="rope", n_kv_heads=n_kv, norm_type="rmsnorm", mlp="swiglu", bias=False)
    mha = _as_mha(gqa, n_kv)
    x = tokens(11, B=2)
    with capture() as a:
        out_g = gqa(x, backend=backend).logits
    with capture() as b:
        out_m = mha(x, backend=backend).logits
    assert (out_g - out_m).abs().max() <= 1e-5
    np.testing.assert_allclose(a["blocks.1.attn"].pattern(), b["blocks.1.attn"].pattern(), atol=1e-6)


def test_sliding_window_is_the_decoders_own_mask():
    m = tiny(sliding_window=3)
    with capture() as cap:
        own = m(tokens(8)).logits
    assert cap["blocks.0.attn"].mask_for()[5].tolist() == [False, False, False, True, True, True, False, False]
    assert torch.equal(own, m(tokens(8), mask=MaskSpec("sliding_window", window=3)).logits)
    assert not torch.allclose(own, m(tokens(8), mask="causal").logits)


def test_hand_built_record_without_gqa_is_unchanged():
    q = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    rec = AttentionRecord("blocks.0.attn", "decoder", 0, "self", "sdpa", "test", 0.5, 0, q, q.copy(), None)
    assert rec.n_kv_heads == 2 and rec.kv_head(1) == 1
    np.testing.assert_allclose(rec.raw_qk(1), q[0, 1] @ q[0, 1].T, rtol=1e-6)


def _repeats(monkeypatch) -> list:
    """Every repeat_kv call the attention makes (its group), counted."""
    import attnlab.model.attention as A

    calls, real = [], A.repeat_kv
    monkeypatch.setattr(A, "repeat_kv", lambda x, g: calls.append(g) or real(x, g))
    return calls


@pytest.mark.parametrize("names", [None, "blocks.*.attn.hook_z"], ids=["records", "hooked"])
@pytest.mark.parametrize("backend", ["sdpa", "flash"])
@pytest.mark.parametrize("n_kv", [2, 1], ids=["gqa", "mqa"])
def test_the_fused_kernel_reads_grouped_heads_without_repeating_them(n_kv, backend, names, monkeypatch):
    """SDPA's flash kernel takes k/v heads as they are (enable_gqa, as transformers passes it): no [B, H, k, d] copy
    of k and v per layer, and the same numbers, bit for bit, as with the heads repeated."""
    m = tiny(positional="rope", n_kv_heads=n_kv, norm_type="rmsnorm", mlp="swiglu", bias=False)
    x = tokens(9, B=2)
    calls = _repeats(monkeypatch)
    with capture(names=names) as cap:
        grouped = m(x, backend=backend).logits
    assert calls == []
    monkeypatch.setattr("attnlab.model.attn_ctx.AttnCtx.grouped", lambda *a: False)
    with capture(names=names) as ref:
        repeated = m(x, backend=backend).logits
    assert calls == [4 // n_kv] * 4  # k and v, two layers
    assert torch.equal(grouped, repeated)
    for site in ("blocks.0.attn", "blocks.1.attn"):
        assert cap[site].kernel == ref[site].kernel == "flash (PyTorch fused CPU kernel) [cpu]"
        np.testing.assert_array_equal(cap[site].pattern(), ref[site].pattern())


def test_eager_maths_and_a_kept_pattern_read_repeated_heads(monkeypatch):
    m = tiny(positional="rope", n_kv_heads=2)
    x = tokens(6)
    calls = _repeats(monkeypatch)
    m(x, backend="eager")
    assert calls == [2] * 4
    calls.clear()
    with capture(names="blocks.0.attn.hook_pattern") as cap:  # sdpa's output, the eager pattern beside it
        m(x, backend="sdpa")
    assert calls == [2, 2]  # only the site whose pattern is kept
    np.testing.assert_allclose(cap.tensors["blocks.0.attn.hook_pattern"][0][0].numpy(), cap["blocks.0.attn"].pattern(),
                               atol=1e-6)


def test_grouped_kv_on_the_cpu():
    from attnlab.model.attn_ctx import AttnCtx

    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)

    def grouped(backend, q, k):
        return AttnCtx(backend, None, is_causal=True).grouped(q, k, k, None, 0.35)

    assert grouped("sdpa", q, k)
    assert grouped("flash", q, k)
    assert not grouped("eager", q, k)
    assert not grouped("sdpa", q, q)  # nothing to group
