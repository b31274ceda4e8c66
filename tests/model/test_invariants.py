"""Pattern invariants for every architecture, position scheme, norm placement and mask."""

import itertools

import numpy as np
import pytest
import torch
from attnlab.model.hooks import capture
from attnlab.model.masks import MaskSpec

from tests.model.helpers import tiny, tokens

POSITIONALS = ["learned", "sinusoidal", "rope", "alibi", "none"]
NORMS = ["pre", "post", "peri"]
MASKS = [
    MaskSpec("causal"),
    MaskSpec("bidirectional"),
    MaskSpec("sliding_window", window=3),
    MaskSpec("prefix_lm", prefix=4),
    MaskSpec("custom", custom=torch.rand(64, 64, generator=torch.Generator().manual_seed(0)) > 0.5),
]


def check_records(cap, outputs=None):
    for site in cap.sites:
        rec = cap[site]
        p, m = rec.pattern(), rec.mask_for()
        live = m.any(-1)
        np.testing.assert_allclose(p.sum(-1)[:, live], 1.0, atol=1e-5)
        assert (p[:, ~m] == 0).all(), "masked entries are exactly 0"
        assert (p[:, ~live] == 0).all(), "a fully masked row gives zeros"
        assert np.isfinite(p).all() and np.isfinite(rec.scores()).all()


@pytest.mark.parametrize("pos, norm", list(itertools.product(POSITIONALS, NORMS)))
def test_decoder_invariants_and_backends_agree(pos, norm):
    m = tiny(positional=pos, norm=norm, qk_norm=pos == "rope", mlp="swiglu" if norm == "peri" else "gelu")
    x = tokens(12, B=2)
    outs, pats = {}, {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(x, backend=backend).logits
        check_records(cap)
        pats[backend] = np.stack([cap[s].pattern(batch=1) for s in cap.sites])
    for backend in ("sdpa", "flash"):
        assert (outs[backend] - outs["eager"]).abs().max() <= 1e-5
        assert np.abs(pats[backend] - pats["eager"]).max() <= 1e-5


@pytest.mark.parametrize("spec", MASKS, ids=lambda s: s.kind)
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_every_mask_under_every_backend(arch, spec):
    m = tiny(arch, positional="alibi" if arch == "decoder" else "learned", output_head="mlm" if arch == "encoder" else None)
    x = tokens(11)
    outs = {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(x, backend=backend, mask=spec).hidden
        check_records(cap)
        rec = cap["blocks.0.attn"]
        expected = {"causal": np.tril(np.ones((11, 11), bool)), "bidirectional": np.ones((11, 11), bool)}
        if spec.kind in expected:
            np.testing.assert_array_equal(rec.mask_for(), expected[spec.kind])
        if spec.kind == "custom":
            np.testing.assert_array_equal(rec.mask_for(), spec.custom[:11, :11].numpy())
    assert (outs["sdpa"] - outs["eager"]).abs().max() <= 1e-5
    assert (outs["flash"] - outs["eager"]).abs().max() <= 1e-5


def test_sliding_window_and_prefix_masks_are_exact():
    m = tiny()
    with capture() as cap:
        m(tokens(8), mask=MaskSpec("sliding_window", window=3))
    mask = cap["blocks.0.attn"].mask_for()
    assert mask[5].tolist() == [False, False, False, True, True, True, False, False]
    with capture() as cap:
        m(tokens(8), mask=MaskSpec("prefix_lm", prefix=3))
    mask = cap["blocks.0.attn"].mask_for()
    assert mask[0].tolist() == [True, True, True, False, False, False, False, False]
    assert mask[5].tolist() == [True] * 6 + [False] * 2


def test_padding_mask_is_per_key_and_fully_masked_rows_are_zero():
    m = tiny("encoder")
    x = tokens(6, B=2)
    pad = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    custom = torch.ones(6, 6, dtype=torch.bool)
    custom[2] = False  # query 2 sees nothing
    outs = {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(x, attention_mask=pad, mask=MaskSpec("custom", custom=custom), backend=backend).hidden
        rec = cap["blocks.1.attn"]
        p0 = rec.pattern(batch=0)
        assert (p0[:, :, 4:] == 0).all(), "padded keys get no weight from any query"
        assert (p0[:, 2] == 0).all() and not np.isnan(p0).any()
        assert rec.mask_for(0)[:, 4:].sum() == 0 and rec.mask_for(1)[:, 4:].sum() == 5 * 2  # 5 live rows × 2 keys
        assert torch.isfinite(outs[backend]).all()
    assert (outs["sdpa"] - outs["eager"]).abs().max() <= 1e-5
    assert (outs["flash"] - outs["eager"]).abs().max() <= 1e-5


@pytest.mark.parametrize("pos", POSITIONALS)
def test_encdec_invariants_and_backends(pos):
    m = tiny("encdec", positional=pos, n_dec_layers=3)
    src, tgt = tokens(9, B=2, seed=2), tokens(6, B=2, seed=3)
    pad = torch.tensor([[1] * 9, [1] * 7 + [0] * 2])
    outs = {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(src, tgt, src_mask=pad, backend=backend).logits
        check_records(cap)
        cross = cap["decoder.blocks.2.cross_attn"]
        assert cross.pattern().shape == (4, 6, 9) and cross.attn_type == "cross"
        assert (cross.pattern(batch=1)[:, :, 7:] == 0).all()
        assert cap["decoder.blocks.0.attn"].mask_for().tolist() == np.tril(np.ones((6, 6), bool)).tolist()
    assert (outs["sdpa"] - outs["eager"]).abs().max() <= 1e-5
    assert (outs["flash"] - outs["eager"]).abs().max() <= 1e-5


def test_capture_does_not_change_logits_and_records_backend():
    m = tiny(positional="rope")
    x = tokens(10)
    plain = m(x, backend="sdpa").logits
    with capture() as cap:
        captured = m(x, backend="sdpa").logits
    assert torch.equal(plain, captured)
    rec = cap["blocks.0.attn"]
    assert rec.backend == "sdpa" and rec.lazy and "flash" in rec.kernel
    assert rec.pattern_full is None, "a fused run keeps q and k, not the O(T²) pattern"
    with capture() as cap:
        m(x, backend="eager")
    assert cap["blocks.0.attn"].kernel == "eager" and not cap["blocks.0.attn"].lazy


def test_lazy_windows_equal_eager_rows():
    m = tiny(positional="alibi")
    x = tokens(20)
    with capture() as eager:
        m(x, backend="eager")
    with capture() as lazy:
        m(x, backend="flash")
    e, z = eager["blocks.1.attn"], lazy["blocks.1.attn"]
    np.testing.assert_allclose(z.pattern(head=2, window=(5, 9, 3, 12)), e.pattern()[2, 5:9, 3:12], atol=1e-6)
    np.testing.assert_allclose(z.scores(head=1), e.scores()[1], atol=1e-5)
    np.testing.assert_allclose(z.raw_qk(head=0) * z.scale + z.bias[0], e.scores(head=0), atol=1e-5)
    with pytest.raises(IndexError):
        z.pattern(window=(0, 30, 0, 5))


# -- grouped-query attention: ratios 1, 2, 4 and multi-query (8 query heads) ------------------------------
KV_HEADS = [8, 4, 2, 1]


@pytest.mark.parametrize("n_kv", KV_HEADS, ids=lambda n: f"kv{n}")
@pytest.mark.parametrize("pos, spec", [("rope", None), ("alibi", MaskSpec("sliding_window", window=4)),
                                       ("learned", MaskSpec("custom", custom=MASKS[-1].custom))],
                         ids=["rope-causal", "alibi-window", "learned-custom"])
def test_gqa_invariants_and_backends_agree(n_kv, pos, spec):
    m = tiny(positional=pos, n_heads=8, n_kv_heads=n_kv, mlp="swiglu", norm_type="rmsnorm", qk_norm=pos == "rope")
    x = tokens(12, B=2)
    outs, pats = {}, {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(x, backend=backend, mask=spec).logits
        check_records(cap)
        rec = cap["blocks.1.attn"]
        assert rec.pattern().shape == (8, 12, 12) and rec.k.shape == (2, n_kv, 12, 4) and rec.n_kv_heads == n_kv
        assert [rec.kv_head(h) for h in range(8)] == [h // (8 // n_kv) for h in range(8)]
        pats[backend] = np.stack([cap[s].pattern(batch=1) for s in cap.sites])
    for backend in ("sdpa", "flash"):
        assert (outs[backend] - outs["eager"]).abs().max() <= 1e-5
        assert np.abs(pats[backend] - pats["eager"]).max() <= 1e-5


@pytest.mark.parametrize("n_kv", [4, 2], ids=lambda n: f"kv{n}")
def test_gqa_encdec_backends_agree(n_kv):
    m = tiny("encdec", positional="rope", n_kv_heads=n_kv)
    src, tgt = tokens(9, B=2, seed=2), tokens(6, B=2, seed=3)
    outs = {}
    for backend in ("eager", "sdpa", "flash"):
        with capture() as cap:
            outs[backend] = m(src, tgt, backend=backend).logits
        check_records(cap)
        cross = cap["decoder.blocks.1.cross_attn"]
        assert cross.pattern().shape == (4, 6, 9) and cross.k.shape[1] == n_kv
    assert (outs["sdpa"] - outs["eager"]).abs().max() <= 1e-5
    assert (outs["flash"] - outs["eager"]).abs().max() <= 1e-5
