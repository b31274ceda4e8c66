import math

import numpy as np
import pytest
import torch
from attnlab.model.hooks import capture
from attnlab.model.positions import alibi_bias, alibi_slopes, apply_rope, rope_angles, sinusoidal_table

from tests.model.helpers import tiny, tokens


def test_permutation_equivariance_without_positions():
    m = tiny("encoder", positional="none")
    x = tokens(9)
    perm = torch.tensor([3, 0, 8, 1, 7, 2, 6, 4, 5])
    with capture(names="*.hook_[qkvz]") as a:
        h = m(x).hidden
    with capture(names="*.hook_[qkvz]") as b:
        hp = m(x[:, perm]).hidden
    torch.testing.assert_close(hp, h[:, perm], atol=1e-5, rtol=0)
    for site in a.sites:
        pa, pb = a[site].pattern(), b[site].pattern()
        np.testing.assert_allclose(pb, pa[:, perm][:, :, perm], atol=1e-6)
        for hook in ("hook_q", "hook_k", "hook_v", "hook_z"):
            torch.testing.assert_close(b.tensor(f"{site}.{hook}"), a.tensor(f"{site}.{hook}")[:, perm],
                                       atol=1e-5, rtol=0)


def test_positions_break_permutation_equivariance():
    m = tiny("encoder", positional="learned")
    x = tokens(9)
    perm = torch.arange(8, -1, -1)
    assert (m(x[:, perm]).hidden - m(x).hidden[:, perm]).abs().max() > 1e-3


def test_rope_scores_depend_only_on_relative_offset():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)
    def score(pq, pk):
        cq, sq = rope_angles(torch.tensor([pq]), 16)
        ck, sk = rope_angles(torch.tensor([pk]), 16)
        return float((apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum())
    base = score(7, 3)
    for shift in (0, 1, 5, 40, 200):
        assert abs(score(7 + shift, 3 + shift) - base) < 1e-4
    assert abs(score(8, 3) - base) > 1e-3
    # rotation keeps the norm
    c, s = rope_angles(torch.tensor([11]), 16)
    assert abs(float(apply_rope(q, c, s).norm()) - float(q.norm())) < 1e-5


def test_rope_model_scores_shift_invariant():
    """Layer 0 of a RoPE model: the same tokens shifted by 5 positions give the same q·kᵀ block."""
    m = tiny(positional="rope", max_len=64)
    x = tokens(6)
    shifted = torch.cat([tokens(5, seed=9), x], dim=1)
    with capture() as a:
        m(x, mask="bidirectional")
    with capture() as b:
        m(shifted, mask="bidirectional")
    qa = a["blocks.0.attn"].raw_qk()  # [H, 6, 6]
    qb = b["blocks.0.attn"].raw_qk()[:, 5:, 5:]
    np.testing.assert_allclose(qb, qa, atol=1e-4)
    assert np.abs(b["blocks.0.attn"].q[:, :, 5:] - a["blocks.0.attn"].q).max() > 1e-2, "q itself is rotated"


def test_alibi_slopes_and_bias():
    s8 = alibi_slopes(8)
    np.testing.assert_allclose(s8.numpy(), [2 ** -(i + 1) for i in range(8)], rtol=1e-6)
    s4 = alibi_slopes(4)
    np.testing.assert_allclose(s4.numpy(), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8], rtol=1e-6)
    s6 = alibi_slopes(6)
    assert len(s6) == 6 and len(set(s6.tolist())) == 6
    b = alibi_bias(s4, torch.arange(2, 5), torch.arange(5))
    assert b.shape == (4, 3, 5)
    assert float(b[0, 2, 1]) == -0.25 * 3  # query 4, key 1: distance 3
    assert float(b[1, 0, 2]) == 0.0


def test_alibi_bias_reaches_the_scores():
    m = tiny(positional="alibi")
    with capture() as cap:
        m(tokens(5), backend="sdpa")
    rec = cap["blocks.0.attn"]
    assert rec.bias.shape == (4, 5, 5)
    np.testing.assert_allclose(rec.scores(head=0), rec.raw_qk(head=0) * rec.scale + rec.bias[0], atol=1e-6)


def test_sinusoidal_table_formula():
    pe = sinusoidal_table(10, 8)
    assert pe.shape == (10, 8)
    assert abs(float(pe[3, 2]) - math.sin(3 / 10000 ** (2 / 8))) < 1e-6
    assert abs(float(pe[3, 3]) - math.cos(3 / 10000 ** (2 / 8))) < 1e-6


def _casts(n_layers: int, names) -> int:
    """How many tensors a bf16 RoPE model's forward casts to another dtype (aten::_to_copy calls)."""
    m = tiny(positional="rope", n_layers=n_layers, n_kv_heads=2).to(torch.bfloat16)
    x = tokens(9)
    with torch.no_grad(), capture(names=names), torch.profiler.profile() as prof:
        m(x, backend="sdpa")
    return sum(e.name == "aten::_to_copy" for e in prof.events())


@pytest.mark.parametrize("names", [None, "blocks.*.attn.*"], ids=["records", "attention-hooks"])
def test_rope_is_cast_to_the_models_dtype_once_per_forward_not_at_every_layer(names):
    """cos and sin (float32) were cast to q's dtype at every site, four casts a layer (on a GPU four kernel launches
    a layer in a forward bound by its host); they are cast once per forward. (A kept norm hook is float32 by design.)"""
    assert _casts(2, names) == _casts(6, names)
