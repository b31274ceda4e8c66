"""What `attnlab bench` measures from a lazy capture is right: lazy patterns equal eager ones, pooled overviews
equal pooling the full matrix, the streamed rollout equals the full rollout. (The benchmark's own wiring:
tests/bench.)"""

import numpy as np
import pytest
import torch
from attnlab.analysis.attention.long_records import exact_window, overview, rollout_query
from attnlab.analysis.attention.pooling import pool_matrix
from attnlab.analysis.attention.rollout import attention_rollout
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.longinput import (
    _weighted_columns_fused,
    full_pattern,
    iter_pattern_rows,
    pattern_rows,
    visible_columns,
    weighted_columns,
)
from attnlab.model.masks import MaskSpec
from attnlab.model.record import AttentionRecord
from attnlab.model.transformer import build_model


def tiny(seed=0, **kw):
    cfg = ModelConfig(**{**dict(vocab_size=61, d_model=32, n_heads=4, n_layers=3, max_len=96), **kw})
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():  # larger weights than the init: peaked rows, so differences would show
        for p in model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    return model


def ids(T, vocab=61, seed=1):
    return torch.randint(0, vocab, (1, T), generator=torch.Generator().manual_seed(seed))


def capture(model, x, backend, **kw):
    with torch.no_grad(), hooks.capture() as cap:
        model(x, backend=backend, **kw)
    return [cap[s] for s in cap.sites]


def peaked_records(T=70, layers=3, heads=4, d=16, seed=0, mask="causal"):
    """Synthetic lazy records with peaked rows; mask 'causal', 'none', 'window' or 'dead' (rows 0 and 5 see nothing)."""
    rng = np.random.default_rng(seed)
    m = {"causal": np.tri(T, dtype=bool), "none": None,
         "window": np.tri(T, dtype=bool) & ~np.tri(T, k=-5, dtype=bool)}.get(mask)
    if mask == "dead":
        m = np.tri(T, dtype=bool)
        m[[0, 5]] = False
    out = []
    for i in range(layers):
        q, k = (rng.standard_normal((1, heads, T, d)).astype(np.float32) * 2 for _ in range(2))
        out.append(AttentionRecord(f"blocks.{i}.attn", "decoder", i, "self", "sdpa", "test", d ** -0.5, 0, q, k,
                                   None if m is None else m[None]))
    return out


def eager_stack(records):
    return np.stack([r.pattern() for r in records])  # [L, H, T, T] through the record's numpy path


# -- lazy patterns equal eager patterns ------------------------------------------------------------------------
CASES = {
    "causal learned": (dict(), dict()),
    "rope": (dict(positional="rope"), dict()),
    "alibi": (dict(positional="alibi"), dict()),
    "sliding window": (dict(), dict(mask=MaskSpec("sliding_window", window=7))),
    "encoder padding": (dict(arch="encoder"), dict(attention_mask=torch.tensor([[1] * 50 + [0] * 10]))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lazy_patterns_equal_eager_patterns(case):
    cfg_kw, run_kw = CASES[case]
    model = tiny(**cfg_kw)
    x = ids(60)
    eager, lazy = capture(model, x, "eager", **run_kw), capture(model, x, "sdpa", **run_kw)
    for e, f in zip(eager, lazy):
        assert not e.lazy and f.lazy
        want = e.pattern()  # [H, T, T], stored by the eager backend
        np.testing.assert_allclose(f.pattern(), want, atol=2e-6)  # AttentionRecord (numpy) recompute
        np.testing.assert_allclose(full_pattern(f, block=17), want, atol=2e-6)  # model.longinput (torch, blocks)
        for h in range(f.n_heads):
            np.testing.assert_allclose(f.pattern(head=h), want[h], atol=2e-6)
            np.testing.assert_allclose(f.pattern(h, (5, 23, 3, 40)), want[h, 5:23, 3:40], atol=2e-6)
        if f.mask is not None:  # exact zeros where the mask forbids attention
            assert not full_pattern(f)[:, ~f.mask_for()].any()


def test_pattern_rows_trim_only_zero_columns():
    rec = peaked_records(mask="window")[0]
    full = rec.pattern()
    for b in iter_pattern_rows(rec, [1, 3], block=9):
        assert (b.k0, b.k1) == visible_columns(rec, b.q0, b.q1)
        np.testing.assert_allclose(b.rows, full[[1, 3], b.q0:b.q1, b.k0:b.k1], atol=2e-6)
        assert not full[:, b.q0:b.q1, :b.k0].any() and not full[:, b.q0:b.q1, b.k1:].any()
    dead = peaked_records(mask="dead")[0]
    p = pattern_rows(dead, 2).numpy()[0]
    assert not p[[0, 5]].any() and np.isfinite(p).all()  # a row with no visible key is all 0, not NaN
    with pytest.raises(IndexError):
        pattern_rows(rec, 4)


# -- pooled overviews equal pooling the full matrix ------------------------------------------------------------
@pytest.mark.parametrize("T, cells, mask", [(70, 512, "causal"), (70, 16, "causal"), (70, 7, "window"),
                                            (101, 10, "causal"), (64, 8, "none"), (50, 9, "dead")])
@pytest.mark.parametrize("how", ["max", "mean"])
@pytest.mark.parametrize("masked_nan", [True, False])
def test_overview_equals_pooling_the_full_matrix(T, cells, mask, how, masked_nan):
    rec = peaked_records(T=T, layers=1, mask=mask)[0]
    full, mask = rec.pattern(), rec.mask_for()
    ref_in = np.where(mask, full, np.nan) if masked_nan else full
    for h in range(rec.n_heads):
        got, qe, ke = overview(rec, h, cells, how, masked_nan=masked_nan, block_rows=13)
        want, wqe, wke = pool_matrix(ref_in[h], cells, how)
        assert np.array_equal(qe, wqe) and np.array_equal(ke, wke)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    every, _, _ = overview(rec, None, cells, how, masked_nan=masked_nan)  # all heads in one pass
    np.testing.assert_allclose(every, pool_matrix(ref_in, cells, how)[0], atol=1e-6, equal_nan=True)


def test_overview_of_a_real_lazy_capture():
    model = tiny()
    rec = capture(model, ids(90), "sdpa")[1]
    got, _, _ = overview(rec, 2, 20, "max")
    want = pool_matrix(np.where(rec.mask_for(), rec.pattern(2), np.nan), 20, "max")[0]
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("mask", ["causal", "none", "window", "dead"])
def test_exact_window_equals_the_pattern_sliced(mask):
    rec = peaked_records(T=70, layers=1, mask=mask)[0]
    full = rec.pattern()
    for h, (q0, q1, k0, k1) in [(0, (0, 70, 0, 70)), (1, (40, 52, 3, 60)), (3, (5, 9, 30, 70)), (2, (69, 70, 0, 1))]:
        got, m = exact_window(rec, h, q0, q1, k0, k1)
        assert got.dtype == np.float32 and got.shape == (q1 - q0, k1 - k0)
        np.testing.assert_allclose(got, full[h, q0:q1, k0:k1], atol=1e-6)
        assert np.array_equal(m, rec.mask_for(0, (q0, q1, k0, k1))) and (got[~m] == 0).all()
    with pytest.raises(ValueError, match="non-empty"):
        exact_window(rec, 0, 10, 10, 0, 5)


# -- streamed rollout equals full rollout ----------------------------------------------------------------------
@pytest.mark.parametrize("mask", ["causal", "none", "window", "dead"])
@pytest.mark.parametrize("fused", [True, False])
def test_streamed_rollout_equals_full_rollout(mask, fused):
    recs = peaked_records(T=48, mask=mask)
    full = attention_rollout(eager_stack(recs))
    for q in (0, 5, 17, 47):
        np.testing.assert_allclose(rollout_query(recs, q, fused=fused), full[q], atol=1e-6)


@pytest.mark.parametrize("fusion, residual, discard", [("max", 0.5, 0.0), ("min", 0.3, 0.0), ("mean", 0.5, 0.4),
                                                       ("max", 0.7, 0.25), ("mean", 0.0, 0.0), ("mean", 1.0, 0.0)])
def test_streamed_rollout_options_equal_full_rollout(fusion, residual, discard):
    recs = peaked_records(T=40, mask="window")
    full = attention_rollout(eager_stack(recs), residual, fusion, discard)
    for q in (3, 39):
        np.testing.assert_allclose(rollout_query(recs, q, residual, fusion, discard), full[q], atol=1e-6)


def test_streamed_rollout_of_a_real_model():
    model = tiny(n_layers=4)
    lazy, eager = capture(model, ids(80), "sdpa"), capture(model, ids(80), "eager")
    full = attention_rollout(eager_stack(eager))
    np.testing.assert_allclose(rollout_query(lazy, 79), full[79], atol=1e-6)
    np.testing.assert_allclose(rollout_query(lazy, 40), full[40], atol=1e-6)


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_weighted_columns_fused_kernel_equals_blocks(mask):
    rec = peaked_records(T=100, layers=1, mask=mask)[0]
    r = np.random.default_rng(3).random(100)
    r[[7, 8]] = 0.0
    want = np.einsum("i,hij->hj", r, rec.pattern().astype(np.float64))
    np.testing.assert_allclose(weighted_columns(rec, r, fused=True), want, rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(_weighted_columns_fused(rec, r, mask == "causal", 0), want, rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(weighted_columns(rec, r, fused=False), want, rtol=1e-5, atol=1e-9)
