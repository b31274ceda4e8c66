"""How a transformer knows where a token is, as numbers the Positions page draws: the sinusoidal table
(Vaswani et al. 2017) and the cosine similarity of position vectors, a model's own position table, RoPE's
relative-offset property, and ALiBi's distance bias.

Everything returned is numpy; torch stays inside.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from attnlab.model.config import ModelConfig
from attnlab.model.positions import alibi_bias, alibi_slopes, apply_rope, rope_angles, sinusoidal_table
from attnlab.model.rope import base_inv_freq, local_rope, rope_inv_freq
from attnlab.model.softmax import masked_softmax


def sinusoidal(n_pos: int, d_model: int) -> np.ndarray:
    """The fixed sinusoidal table [n_pos, d_model] (Vaswani et al. 2017)."""
    return sinusoidal_table(n_pos, d_model).numpy()


def similarity(table) -> np.ndarray:
    """Cosine similarity between every pair of position vectors: [P, P]."""
    t = np.asarray(table, dtype=np.float64)
    n = np.linalg.norm(t, axis=-1, keepdims=True)
    u = t / np.where(n > 0, n, 1)
    return (u @ u.T).astype(np.float32)


def position_table(lm) -> tuple[str, np.ndarray | None]:
    """The model's own absolute position vectors: ("learned", weights [max_len, D]), ("sinusoidal",
    its table), or (scheme, None) for RoPE, ALiBi and none (nothing is added to the embeddings)."""
    m = lm.model
    stack = m.decoder if hasattr(m, "decoder") and hasattr(m, "encoder") else m
    emb = stack.embed
    if lm.cfg.positional == "learned":
        return "learned", emb.pos.weight.detach().float().cpu().numpy().copy()
    if lm.cfg.positional == "sinusoidal":
        return "sinusoidal", emb.sin_table.detach().float().cpu().numpy().copy()
    return lm.cfg.positional, None


def rope_demo(d_head: int = 16, n_pos: int = 24, base: float = 10000.0, seed: int = 0) -> dict:
    """RoPE's relative-offset property, numerically: one fixed query vector q and key vector k, rotated
    to every position m and n; the score matrix S[m, n] = rot(q, m)·rot(k, n) is constant along each
    diagonal (it depends on n − m only). For contrast, absolute sinusoidal positions added to q and k
    give A[m, n] = (q + p_m)·(k + p_n), which changes along a diagonal.

    Returns S, A [P, P], per offset o = m − n ≥ 0 the spread (max − min) along that diagonal, and
    `diagonals` [offsets, m]: S[m + o, m] for the first few m (every row of it is one repeated number)."""
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head size, got {d_head}")
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d_head, generator=g), torch.randn(d_head, generator=g)
    pos = torch.arange(n_pos)
    cos, sin = rope_angles(pos, d_head, base)  # [P, d]
    rq = apply_rope(q.expand(1, 1, n_pos, d_head), cos, sin)[0, 0]  # [P, d]
    rk = apply_rope(k.expand(1, 1, n_pos, d_head), cos, sin)[0, 0]
    S = (rq @ rk.T).double().numpy()
    pe = sinusoidal_table(n_pos, d_head)
    A = ((q + pe) @ (k + pe).T).double().numpy()
    offsets = np.arange(max(1, n_pos - 1))  # a diagonal needs two cells to have a spread
    spread_rope = np.array([np.ptp(np.diagonal(S, -o)) for o in offsets])
    spread_abs = np.array([np.ptp(np.diagonal(A, -o)) for o in offsets])
    n_m = min(8, n_pos)
    diag = np.full((min(6, n_pos), n_m), np.nan)
    for o in range(diag.shape[0]):
        d = np.diagonal(S, -o)[:n_m]
        diag[o, : len(d)] = d
    angles = (pos.float()[:, None] * base ** (-torch.arange(0, d_head, 2).float() / d_head)[None]).numpy()
    return {"S": S.astype(np.float32), "A": A.astype(np.float32), "offsets": offsets, "spread_rope": spread_rope,
            "spread_abs": spread_abs, "angles": angles.astype(np.float32),
            "cos_angles": np.cos(angles).astype(np.float32), "d_head": d_head, "base": base,
            "diagonals": diag}


def rope_frequencies(cfg: ModelConfig) -> dict:
    """A RoPE model's own frequencies per pair of rotary dims, as its layers use them: `theta` (after any scaling)
    beside `theta_plain` (base^(−2i/r) before it), their wavelengths 2π/θ in tokens and the ratio plain/used (1 where
    nothing changed, the factor where long wavelengths were stretched). Also the rotary dims r of d_head, the base
    and the scaling's settings, and a local RoPE's base and layers (Gemma 3's sliding layers; None without)."""
    if cfg.positional != "rope":
        raise ValueError(f"the model uses {cfg.positional!r} positions, not RoPE")
    rot = cfg.rotary_dim or cfg.d_head
    plain = base_inv_freq(rot, cfg.rope_base).double().numpy()
    used = rope_inv_freq(cfg).double().numpy()
    scaling = {"kind": cfg.rope_scaling}
    if cfg.rope_scaling != "none":
        scaling["factor"] = cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        scaling |= {"low_freq_factor": cfg.rope_low_freq, "high_freq_factor": cfg.rope_high_freq,
                    "original_context": cfg.rope_original_len}
    return {"theta": used, "theta_plain": plain, "wavelength": 2 * np.pi / used, "wavelength_plain": 2 * np.pi / plain,
            "stretch": plain / used, "rotary_dims": rot, "d_head": cfg.d_head, "base": cfg.rope_base,
            "local_base": cfg.rope_local_base, "local_layers": None if cfg.rope_local_base is None else tuple(
                i for i in range(cfg.n_layers) if local_rope(cfg, i)),
            "scaling": scaling}


def alibi(n_heads: int, T: int) -> dict:
    """ALiBi (Press et al. 2022): slopes m_h and the causal bias −m_h·(i − j) per head: [H, T, T]."""
    slopes = alibi_slopes(n_heads)
    pos = torch.arange(T)
    bias = alibi_bias(slopes, pos, pos).numpy()
    mask = np.tril(np.ones((T, T), dtype=bool))
    last = masked_softmax(bias[:, -1, :], mask[-1])  # [H, T]: weights of the last query with equal raw scores
    return {"slopes": slopes.numpy(), "bias": bias.astype(np.float32), "mask": mask, "last_weights": last,
            "half_life": np.array([math.log(2) / s for s in slopes.tolist()])}
