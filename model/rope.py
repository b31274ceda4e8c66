"""RoPE's frequencies for a config: θ_i = base^(−2i/r) over the rotary dims r (all of d_head, or rotary_dim), then
rescaled as the checkpoint asks: linear (every θ_i / factor), llama3 (Llama 3.1: long wavelengths / factor,
short ones kept, a smooth blend between), yarn (interpolated and extrapolated frequencies blended by a ramp over
the dims) or longrope (Phi-3: θ_i / short_i, or / long_i once a forward reaches past the original length). yarn
and longrope also multiply cos and sin by an attention factor, so every score carries its square. Computed as
transformers does, so converted checkpoints get bit-identical angles."""

from __future__ import annotations

import math

import torch
from attnlab.model.config import ModelConfig


def base_inv_freq(rot: int, base: float, device=None) -> torch.Tensor:
    """θ_i = 1 / base^(2i/rot), i = 0 … rot/2 − 1: float32 [rot/2]."""
    return 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.int64, device=device).float() / rot))


def llama3_inv_freq(inv: torch.Tensor, factor: float, low: float, high: float, original_len: int) -> torch.Tensor:
    """Llama 3.1's rescaling: wavelengths above original_len/low are divided by `factor`, below original_len/high
    kept, and blended linearly in 1/wavelength between."""
    low_wavelen, high_wavelen = original_len / low, original_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (original_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


def yarn_inv_freq(cfg: ModelConfig, device=None) -> torch.Tensor:
    """YaRN: θ_i / factor (interpolated) for the slow dims, θ_i (extrapolated) for the fast ones, blended by a
    linear ramp between the dims that turn beta_fast and beta_slow times over the original length."""
    rot, base, original = cfg.rotary_dim or cfg.d_head, cfg.rope_base, cfg.rope_original_len

    def dim_of(rotations: float) -> float:  # the dim that turns `rotations` times over the original length
        return (rot * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = dim_of(cfg.rope_beta[0]), dim_of(cfg.rope_beta[1])
    if cfg.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    pos_freqs = base ** (torch.arange(0, rot, 2).to(device=device, dtype=torch.float) / rot)
    ramp = ((torch.arange(rot // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1).to(device)
    extrapolation = 1 - ramp
    return (1.0 / (cfg.rope_factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def local_rope(cfg: ModelConfig, layer: int | None) -> bool:
    """True when `layer` turns q and k by the local RoPE (cfg.rope_local_base: Gemma 3's sliding layers)."""
    return cfg.rope_local_base is not None and layer is not None and \
        (cfg.sliding_layers is None or layer in cfg.sliding_layers)


def long_factors(cfg: ModelConfig, n_positions: int) -> bool:
    """True when longrope's long factors apply: a forward reaching past the original length."""
    return cfg.rope_scaling == "longrope" and n_positions > cfg.rope_original_len


def rope_inv_freq(cfg: ModelConfig, device=None, n_positions: int = 0, layer: int | None = None) -> torch.Tensor:
    """The frequencies cfg's RoPE turns each pair of rotary dims by, per position: float32 [rotary dims / 2], in
    `layer` (the local base, unscaled, where local_rope says; None: the global RoPE). `n_positions` (the highest
    position of the forward + 1) picks longrope's long factors past the original length."""
    rot = cfg.rotary_dim or cfg.d_head
    if local_rope(cfg, layer):
        return base_inv_freq(rot, cfg.rope_local_base, device)
    if cfg.rope_scaling == "yarn":
        return yarn_inv_freq(cfg, device)
    if cfg.rope_scaling == "longrope":
        ext = cfg.rope_long if long_factors(cfg, n_positions) else cfg.rope_short
        shape = torch.arange(0, rot, 2, dtype=torch.int64, device=device).float() / rot
        return 1.0 / (torch.tensor(ext, dtype=torch.float32, device=device) * cfg.rope_base ** shape)
    inv = base_inv_freq(rot, cfg.rope_base, device)
    if cfg.rope_scaling == "linear":
        return inv / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        return llama3_inv_freq(inv, cfg.rope_factor, cfg.rope_low_freq, cfg.rope_high_freq, cfg.rope_original_len)
    return inv


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                 attn_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rot] for the rotate-half convention: angle θ_i·p, the rot/2 angles written twice; both × the
    attention factor (yarn, longrope)."""
    ang = positions.float()[:, None] * inv_freq[None, :]  # [T, rot/2]
    ang = torch.cat([ang, ang], dim=-1)  # [T, rot]
    if attn_factor == 1.0:
        return ang.cos(), ang.sin()
    return ang.cos() * attn_factor, ang.sin() * attn_factor


def layer_cos_sin(cfg: ModelConfig, positions: torch.Tensor, layer: int | None = None, n_positions: int = 0,
                  memo: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rot] of `layer`'s RoPE at `positions` (float32), the attention factor (yarn, longrope) on the
    global RoPE only. `memo` (a model's own dict) keeps the frequencies per device and kind, made once rather than in
    every forward (llama3's and yarn's are a dozen small operations)."""
    local = local_rope(cfg, layer)
    key = (positions.device, local, long_factors(cfg, n_positions))
    inv = None if memo is None else memo.get(key)
    if inv is None:
        inv = rope_inv_freq(cfg, positions.device, n_positions, layer)
        if memo is not None:
            memo[key] = inv
    return rope_cos_sin(positions, inv, 1.0 if local else cfg.rope_attn_factor)
