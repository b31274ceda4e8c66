"""attnlab.model.streaming: the sliding window with sinks as a mask, and StreamingLLM's cache positions (RoPE) checked
against the cache itself: a literal StreamingLLM cache run token by token (keys kept before RoPE, turned by their
slot), and on one layer a plain forward over the tokens the cache holds (sinks, then the window) at positions 0.."""

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.cache import KVCache
from attnlab.model.masks import CAUSAL, MaskSpec, pair_mask
from attnlab.model.positions import apply_rope
from attnlab.model.rope import rope_cos_sin, rope_inv_freq
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


class StreamingCache(KVCache):
    """StreamingLLM's cache, literally: keys kept before RoPE, the first S and the last W − 1 after each step, and
    every key turned by its slot in the cache when read (the query sits at the next slot)."""

    def __init__(self, cfg):
        super().__init__()
        self.inv, self.held = rope_inv_freq(cfg), 0  # keys held per site before this step

    def _turn(self, k, slots):
        return apply_rope(k, *rope_cos_sin(slots, self.inv))

    def append(self, site, k, v):
        slot = len(self)  # the slot this step's query and key were turned to
        raw = self._turn(k, torch.tensor([-slot]))  # undo RoPE: [B, Hkv, 1, d]
        if site in self.self_kv:
            raw, v = torch.cat([self.self_kv[site][0], raw], dim=2), torch.cat([self.self_kv[site][1], v], dim=2)
        self.self_kv[site] = (raw, v)
        return self._turn(raw, torch.arange(raw.shape[2])), v

    def advance(self, n):
        self.held = min(self.held + n, S + W - 1)
        for site, (k, v) in self.self_kv.items():
            if k.shape[2] > S + W - 1:  # evict the oldest key after the sinks
                keep = [*range(S), *range(k.shape[2] - (W - 1), k.shape[2])]
                self.self_kv[site] = (k[:, :, keep], v[:, :, keep])

    def __len__(self):
        return self.held


def test_cache_positions_equal_a_literal_streaming_cache_on_three_layers():
    model = tiny(positional="rope", n_kv_heads=2, n_layers=3)
    ids = tokens(T)
    moved = logits(model, ids, window_mask(W, S), cache_position_interventions(model.cfg, sites(model), W, S))
    cache = StreamingCache(model.cfg)
    with torch.no_grad():
        steps = torch.cat([model(ids[:, i:i + 1], cache=cache, backend="eager").logits[0] for i in range(T)])  # [T, V]
    assert len(cache) == S + W - 1
    torch.testing.assert_close(moved, steps, rtol=0, atol=1e-6)  # measured 1.3e-7
    kept = logits(model, ids, window_mask(W, S))  # the sinks at their own positions: not the cache's run
    assert (kept - steps).abs().max() > 1e-4  # measured 7.5e-4


def test_cache_positions_only_for_rope():
    assert can_move_sinks(tiny(positional="rope").cfg)
    assert not can_move_sinks(tiny(positional="learned").cfg)
    with pytest.raises(ValueError, match="RoPE"):
        cache_position_interventions(tiny(positional="alibi").cfg, ["blocks.0.attn"], W, S)
