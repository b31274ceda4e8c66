"""attnlab.model.streaming: the sliding window with sinks as a mask, and StreamingLLM's cache positions (RoPE) checked
against the cache itself: on one layer, query i of the cached run reads exactly a plain forward over the tokens the
cache holds (sinks, then the window) at positions 0.."""

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.masks import CAUSAL, MaskSpec, pair_mask
from attnlab.model.streaming import cache_position_interventions, can_move_sinks, window_mask

from tests.model.helpers import tiny, tokens

S, W, T = 2, 5, 20


def sites(model) -> list[str]:
    return [n.rsplit(".", 1)[0] for n in model.hook_names() if n.endswith(".attn.hook_attn_scores")]


def logits(model, ids, mask=None, fns=None, backend="eager"):
    with torch.no_grad(), hooks.intervene(fns or {}):
        return model(ids, mask=mask, backend=backend).logits[0]  # [T, V]


def test_window_with_sinks_truth_table():
    m = pair_mask(window_mask(3, 2), 7, 7).numpy()
    want = [[1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 1, 1, 1, 0], [1, 1, 0, 0, 1, 1, 1]]
    np.testing.assert_array_equal(m, np.array(want, bool))
    np.testing.assert_array_equal(pair_mask(window_mask(3), 7, 7).numpy(),
                                  pair_mask(MaskSpec("sliding_window", window=3), 7, 7).numpy())
    np.testing.assert_array_equal(pair_mask(window_mask(7, 4), 7, 7).numpy(), np.tril(np.ones((7, 7), bool)))
    np.testing.assert_array_equal(pair_mask(window_mask(3, 2), 2, 7, q_offset=5).numpy(), m[5:])  # cached rows
    with pytest.raises(ValueError, match="sinks"):
        MaskSpec("causal", sinks=2)
    with pytest.raises(ValueError, match="sinks"):
        MaskSpec("sliding_window", window=3, sinks=-1)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_window_rows_before_it_slides_equal_full_attention(backend):
    model, ids = tiny(positional="rope", n_kv_heads=2, n_layers=2), tokens(T)
    full = logits(model, ids, CAUSAL, backend=backend)
    win = logits(model, ids, window_mask(W, S), backend=backend)
    torch.testing.assert_close(win[:S + W], full[:S + W], rtol=0, atol=1e-5)
    assert (win[S + W:] - full[S + W:]).abs().max() > 1e-3  # later rows lost keys
    torch.testing.assert_close(logits(model, ids, window_mask(T, S), backend=backend), full, rtol=0, atol=1e-5)


def test_cache_positions_equal_streamingllm_cache_on_one_layer():
    """One layer: keys and values depend on their token and slot only, so the cached run's row i is the last row of
    a plain forward over [sinks, window of i] at positions 0..S+W−1 (GQA: 4 query heads, 2 k/v heads)."""
    model = tiny(positional="rope", n_kv_heads=2, n_layers=1)
    ids = tokens(T)
    fns = cache_position_interventions(model.cfg, sites(model), W, S)
    moved = logits(model, ids, window_mask(W, S), fns)
    kept = logits(model, ids, window_mask(W, S))
    for i in range(T):
        held = ids[:, :i + 1] if i < S + W else torch.cat([ids[:, :S], ids[:, i - W + 1:i + 1]], dim=1)  # [1, ≤ S+W]
        torch.testing.assert_close(moved[i], logits(model, held, CAUSAL)[-1], rtol=0, atol=2e-5)
    torch.testing.assert_close(moved[:S + W], kept[:S + W], rtol=0, atol=1e-6)  # before the slide: same positions
    assert (moved[S + W:] - kept[S + W:]).abs().max() > 1e-4  # after it the sinks sit closer (measured 8e-4)


def test_cache_positions_only_for_rope():
    assert can_move_sinks(tiny(positional="rope").cfg)
    assert not can_move_sinks(tiny(positional="learned").cfg)
    with pytest.raises(ValueError, match="RoPE"):
        cache_position_interventions(tiny(positional="alibi").cfg, ["blocks.0.attn"], W, S)
