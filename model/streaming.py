"""StreamingLLM's attention (Xiao et al. 2024) in one forward: a sliding window of `window` keys that also keeps the
first `sinks` keys, the attention sinks.

Two ways to place the kept tokens:
- original positions (`window_mask`): query i sees keys 0..sinks−1 and i−window+1..i, every token at its own
  position. A rolling KV cache computes exactly this when it keeps each key at the position it was written at.
- cache positions (`cache_position_interventions`, RoPE only): StreamingLLM stores keys before RoPE and rotates them
  by their slot in the cache, so once the window has slid (i ≥ sinks + window) the query sits at slot
  sinks + window − 1, the sinks at 0..sinks−1 and the window right after them. RoPE depends on q − k only, so the
  window keys keep their distance i − j; only the sinks move, from distance i − s to sinks + window − 1 − s. The
  interventions recompute the sink columns' scores with each query turned back by δ_i = i − (sinks + window − 1).
  Without sinks both placements give the same distances (and the same run).

Every key a token reads in either way was computed from that token's own window, as in the cached run: the
keys are never recomputed, so one masked forward is the rolling cache, not a re-run over each window.
"""

from __future__ import annotations

import torch
from attnlab.model.attention_kernels import repeat_kv
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import Intervention
from attnlab.model.masks import MaskSpec
from attnlab.model.positions import apply_rope
from attnlab.model.rope import rope_cos_sin, rope_inv_freq


def window_mask(window: int, sinks: int = 0) -> MaskSpec:
    """Query i sees keys i−window+1..i, and keys 0..sinks−1 (at their original positions)."""
    return MaskSpec("sliding_window", window=window, sinks=sinks)


def can_move_sinks(cfg: ModelConfig) -> bool:
    """True when StreamingLLM's cache positions can be rebuilt here: RoPE, no score soft-capping."""
    return cfg.positional == "rope" and cfg.attn_softcap is None


def cache_position_interventions(cfg: ModelConfig, sites: list[str], window: int, sinks: int) -> dict[str, Intervention]:
    """Interventions for every self-attention site (with `window_mask(window, sinks)` as the mask) that give the
    sink keys StreamingLLM's cache positions: scores[i, s] = scale · R(−δ_i)q_i · k_s for i ≥ sinks + window."""
    if not can_move_sinks(cfg):
        raise ValueError("cache positions need RoPE and unsoftcapped scores")
    group, last_slot = cfg.n_heads // cfg.kv_heads, sinks + window - 1
    kept: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, name: str) -> torch.Tensor:
        kept[name] = x
        return x

    def move_sinks(scores: torch.Tensor, name: str) -> torch.Tensor:
        site = name.rsplit(".", 1)[0]
        # hook_q [B, T, H, d], hook_k [B, T, Hkv, d] (TransformerLens's layouts) -> [B, H, T, d], [B, Hkv, T, d]
        q, k = kept.pop(f"{site}.hook_q").transpose(1, 2), kept.pop(f"{site}.hook_k").transpose(1, 2)
        T = q.shape[2]
        if T <= last_slot + 1 or sinks == 0:
            return scores
        rows = torch.arange(last_slot + 1, T, device=q.device)  # the queries whose window has slid past the sinks
        layer = int(site.split(".")[1])  # a decoder's "blocks.{i}.attn"
        cos, sin = rope_cos_sin(-(rows - last_slot), rope_inv_freq(cfg, q.device, layer=layer))  # [R, rot]: back by δ_i
        q_slot = apply_rope(q[:, :, rows], cos, sin)  # [B, H, R, d]: each query at the last cache slot
        k_sink = repeat_kv(k[:, :, :sinks], group)  # [B, Hkv, S, d] -> [B, H, S, d]
        out = scores.clone()
        out[:, :, rows, :sinks] = torch.matmul(q_slot, k_sink.transpose(-2, -1)) * cfg.score_scale  # [B, H, R, S]
        return out

    fns: dict[str, Intervention] = {}
    for s in sites:
        fns |= {f"{s}.hook_q": keep, f"{s}.hook_k": keep, f"{s}.hook_attn_scores": move_sinks}
    return fns
