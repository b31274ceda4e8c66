"""Flash attention's tiling: the online softmax over key/value blocks gives the full softmax's output."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.machinery.flash_tiling import head_tiling, tiled_attention
from attnlab.model.softmax import masked_softmax


@pytest.mark.parametrize("bq, bk", [(1, 1), (4, 3), (16, 16), (64, 64)])
def test_tiled_output_equals_the_full_softmax(bq, bk):
    rng = np.random.default_rng(1)
    T, d = 37, 8
    q, k, v = rng.normal(size=(T, d)) * 3, rng.normal(size=(T, d)) * 3, rng.normal(size=(T, d))
    causal = np.tril(np.ones((T, T), bool))
    t = tiled_attention(q, k, v, causal, block_q=bq, block_k=bk)
    want = masked_softmax(q @ k.T / np.sqrt(d), causal) @ v
    np.testing.assert_allclose(t.reference, want, atol=1e-12)
    assert t.max_abs_diff <= 1e-12
    nq, nk = -(-T // bq), -(-T // bk)
    assert len(t.steps) + len(t.skipped) == nq * nk  # every tile computed or skipped as fully masked
    assert all(not causal[r0:r1, c0:c1].any() for (r0, r1), (c0, c1) in t.skipped)
    assert all(s.scores.shape == (s.rows[1] - s.rows[0], s.cols[1] - s.cols[0]) for s in t.steps)


def test_running_max_and_sum_rescale_as_blocks_arrive():
    q = np.array([[1.0, 0.0]])
    k = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 0.0], [5.0, 0.0]])  # scores 0, 2, 1, 5 at scale 1
    v = np.eye(4)[:, :2]
    t = tiled_attention(q, k, v, scale=1.0, block_q=1, block_k=2)
    a, b = t.steps
    np.testing.assert_allclose([a.m_before[0], a.m_after[0], b.m_after[0]], [-np.inf, 2.0, 5.0])
    np.testing.assert_allclose(a.l_after, [np.exp(-2) + 1])  # exp(0 − 2) + exp(2 − 2)
    np.testing.assert_allclose(b.rescale, [np.exp(2 - 5)])  # the old sum scaled to the new max
    np.testing.assert_allclose(b.l_after, [(np.exp(-2) + 1) * np.exp(-3) + np.exp(1 - 5) + 1])
    s = np.array([0.0, 2, 1, 5])
    np.testing.assert_allclose(b.l_after, [np.exp(s - 5).sum()])
    np.testing.assert_allclose(t.output, (np.exp(s - 5) / np.exp(s - 5).sum() @ v)[None])


def test_a_real_head_matches_the_model_and_never_forms_the_matrix(decoder):
    inp = decoder.encode("The cat sat on the mat because the mat was warm.")
    t, z = head_tiling(decoder, inp, "blocks.1.attn", 2, block_q=8, block_k=8)
    assert t.max_abs_diff <= 1e-6 and np.abs(t.output - z).max() <= 1e-5
    assert t.T == inp.ids.shape[1] and t.tile_cells == 64 < t.full_cells == t.T ** 2
    assert max(s.scores.size for s in t.steps) <= 64 and t.skipped  # causal: tiles above the diagonal skipped


def test_bad_blocks_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        tiled_attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), block_q=0)


@pytest.mark.parametrize("kw", [dict(positional="alibi"), dict(positional="rope", attn_softcap=2.0)])
def test_biased_and_soft_capped_heads_tile_exactly(kw):
    """ALiBi's bias and Gemma 2's soft-cap are applied tile by tile (FlashAttention-2 does both): the tiled output
    equals the model's own head output."""
    import torch
    from attnlab.model.config import ModelConfig
    from attnlab.model.loaded import LoadedModel
    from attnlab.model.tokenizer import ByteTokenizer
    from attnlab.model.transformer import build_model

    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64, **kw)
    torch.manual_seed(3)
    lm = LoadedModel("tiny", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    t, z = head_tiling(lm, lm.encode("attention, tile by tile"), "blocks.1.attn", 3, block_q=5, block_k=7)
    assert t.max_abs_diff <= 1e-9 and np.abs(t.output - z).max() <= 1e-5


def test_each_tiles_partial_output_is_the_softmax_of_the_keys_seen_so_far():
    rng = np.random.default_rng(4)
    T, d = 11, 4
    q, k, v = rng.normal(size=(T, d)) * 2, rng.normal(size=(T, d)) * 2, rng.normal(size=(T, d))
    t = tiled_attention(q, k, v, block_q=T, block_k=3)
    for s in t.steps:  # keys 0 .. s.cols[1] - 1 have arrived
        seen = slice(0, s.cols[1])
        want = masked_softmax(q @ k[seen].T / np.sqrt(d)) @ v[seen]  # [T, d]
        np.testing.assert_allclose(s.out_after, want, atol=1e-12)
    np.testing.assert_allclose(t.steps[-1].out_after, t.output, atol=0)
