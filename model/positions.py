"""Position information: sinusoidal tables, RoPE rotations and ALiBi biases."""

from __future__ import annotations

import math

import torch


def sinusoidal_table(n_pos: int, d_model: int) -> torch.Tensor:
    """[n_pos, d_model]: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]  # [P, 1]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_pos, d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return pe


def rope_angles(positions: torch.Tensor, d_head: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, d_head] for the rotate-half convention: angle θ_i·p with θ_i = base^(−2i/d)."""
    # 1 / base^(2i/d), computed as transformers' Llama does (bit-identical angles for converted checkpoints)
    inv = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32, device=positions.device) / d_head))
    ang = positions.float()[:, None] * inv[None, :]  # [T, d/2]
    ang = torch.cat([ang, ang], dim=-1)  # [T, d]
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, d] by its position: x·cos + rotate_half(x)·sin. cos, sin [T, r] with r < d (partial
    rotary) turn the first r dims only; the rest pass unchanged."""
    rot = cos.shape[-1]
    if rot < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :rot], cos, sin), x[..., rot:]], dim=-1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    if cos.dtype != x.dtype:
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotated * sin


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """[H] slopes of Press et al. (2022): 2^(−8h/n) for a power-of-two n, interleaved otherwise."""

    def pow2(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(pow2(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = pow2(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(pow2(closest) + extra)


def alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """[H, q, k] bias −m_h·|i − j| added to the scaled scores (future keys are masked anyway)."""
    dist = (q_pos[:, None] - k_pos[None, :]).abs().float()  # [q, k]
    return -slopes.to(dist.device)[:, None, None] * dist[None]
