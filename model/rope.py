"""RoPE's frequencies for a config: θ_i = base^(−2i/r) over the rotary dims r (all of d_head, or rotary_dim), then
rescaled as the checkpoint asks: linear (every θ_i / factor) or llama3 (Llama 3.1: long wavelengths / factor,
short ones kept, a smooth blend between). Computed as transformers does, so converted checkpoints get bit-identical
angles."""

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


def rope_inv_freq(cfg: ModelConfig, device=None) -> torch.Tensor:
    """The frequencies cfg's RoPE turns each pair of rotary dims by, per position: float32 [rotary dims / 2]."""
    inv = base_inv_freq(cfg.rotary_dim or cfg.d_head, cfg.rope_base, device)
    if cfg.rope_scaling == "linear":
        return inv / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        return llama3_inv_freq(inv, cfg.rope_factor, cfg.rope_low_freq, cfg.rope_high_freq, cfg.rope_original_len)
    return inv


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rot] for the rotate-half convention: angle θ_i·p, the rot/2 angles written twice."""
    ang = positions.float()[:, None] * inv_freq[None, :]  # [T, rot/2]
    ang = torch.cat([ang, ang], dim=-1)  # [T, rot]
    return ang.cos(), ang.sin()
