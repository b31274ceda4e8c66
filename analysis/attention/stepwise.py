"""Scaled dot-product attention one step at a time (Vaswani et al. 2017, eq. 1), for teaching:

    raw = Q·Kᵀ,  scaled = raw·scale + bias,  masked = scaled with −inf where the mask is False,
    weights = softmax(masked) row-wise (a fully masked row gives zeros),  output = weights·V.

`attention_steps` gives every intermediate; `multi_head_steps` splits the columns into heads and
concatenates their outputs; `explain_weight` gives the numbers behind one weight (the Step-by-step page's quiz).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from attnlab.model.softmax import masked_softmax, shifted_exp

# The lecture's quiz: scaled scores, a causal mask, and α₂,₂ = 0.5 (rows and columns counted from 1); values V.
QUIZ_SCORES = np.array([[1, 0, -1, -1], [1, 1, -1, 0], [0, 1, 1, -1], [-1, -1, 2, 1]], dtype=float)
QUIZ_V = np.array([[1, 0], [0, 1], [1, 1], [0, -1]], dtype=float)


@dataclass(frozen=True)
class Steps:
    raw: np.ndarray  # [..., q, k]  Q·Kᵀ, or the given score matrix
    scale: float  # 1/√d_k from q, or 1.0 for a given score matrix
    scaled: np.ndarray  # [..., q, k]  raw·scale + bias
    masked: np.ndarray  # [..., q, k]  scaled, −inf where masked
    weights: np.ndarray  # [..., q, k]  softmax rows, exactly 0 where masked
    output: np.ndarray | None  # [..., q, d_v]  weights·V, None without v


def attention_steps(q=None, k=None, v=None, mask=None, scale: float | None = None, scores=None,
                    bias=None) -> Steps:
    """Every intermediate of softmax(Q·Kᵀ·scale + bias, mask)·V (Vaswani et al. 2017, eq. 1).

    Give q [..., q, d] and k [..., k, d] (scale defaults to 1/√d), or `scores` [..., q, k] as the
    raw matrix (scale defaults to 1, i.e. the scores are taken as already scaled). mask: bool
    broadcastable to [..., q, k], True = may attend. v [..., k, d_v] is optional.
    """
    if scores is None:
        if q is None or k is None:
            raise ValueError("give q and k, or a score matrix")
        q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
        if q.ndim < 2 or q.shape[-1] != k.shape[-1]:
            raise ValueError(f"q [..., q, d] and k [..., k, d] must share d, got {q.shape} and {k.shape}")
        raw = q @ np.swapaxes(k, -1, -2)  # [..., q, k]
        scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    else:
        if q is not None or k is not None:
            raise ValueError("give either q and k or a score matrix, not both")
        raw = np.asarray(scores, dtype=np.float64)
        scale = 1.0 if scale is None else scale
    if raw.ndim < 2 or not np.isfinite(raw).all():
        raise ValueError(f"scores must be finite [..., q, k], got shape {raw.shape}")
    scaled = raw * scale + (0 if bias is None else np.asarray(bias, dtype=np.float64))
    m = np.ones(scaled.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), scaled.shape)
    masked = np.where(m, scaled, -np.inf)
    weights = masked_softmax(scaled, m)
    output = None if v is None else weights @ np.asarray(v, dtype=np.float64)  # [..., q, d_v]
    return Steps(raw, float(scale), scaled, masked, weights, output)


def multi_head_steps(q, k, v, n_heads: int, mask=None) -> tuple[list[Steps], np.ndarray]:
    """Split q, k, v [T, d_model] into n_heads column blocks of d_model/n_heads (each head its own
    d_head and its own 1/√d_head), attend per head, and concatenate the outputs: [T, d_model].
    (A real layer multiplies the concatenation by an output projection W_O; here W_O = I.)"""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    d = q.shape[-1]
    if d % n_heads:
        raise ValueError(f"d_model={d} is not divisible by {n_heads} heads")
    dh = d // n_heads
    steps = [attention_steps(q[:, h * dh:(h + 1) * dh], k[:, h * dh:(h + 1) * dh], v[:, h * dh:(h + 1) * dh],
                             mask=mask) for h in range(n_heads)]
    return steps, np.concatenate([s.output for s in steps], axis=-1)


def explain_weight(steps: Steps, i: int, j: int) -> dict:
    """The numbers behind one weight α_ij (0-based): the visible scores of row i, their exponentials
    (shifted by the row max for stability) and the share of key j."""
    row = steps.masked[i]
    vis = np.isfinite(row)
    ex = shifted_exp(np.where(vis, row, 0.0), vis)  # [k], 0 where masked
    total = float(ex.sum())
    return {"row": i, "col": j, "visible": vis, "scores": steps.scaled[i], "exp": ex, "total": total,
            "weight": float(steps.weights[i, j]), "masked": not bool(vis[j])}


def neuron_view(rec, head: int, query: int, key: int, batch: int = 0) -> dict:
    """One score of a real model, dimension by dimension, from an AttentionRecord: the query vector q and the
    key vector k (d_head values each, after QK-norm and RoPE), their elementwise product q⊙k, its sum (the raw
    score q·k), the scale 1/√d_k, any soft-cap (cap·tanh(·/cap), Gemma 2), any positional bias, the scaled score
    and the resulting weight (the record's pattern at that cell, whose softmax ran over the query's whole row)."""
    q = rec.q[batch, head, query].astype(np.float64)  # [d_head]
    k = rec.keys(head, batch)[0, key].astype(np.float64)  # [d_head]: the k/v head this query head met
    prod = q * k  # [d_head]
    bias = 0.0 if rec.bias is None else float(rec.bias[head, query, key])
    raw = float(prod.sum())
    return {"q": q, "k": k, "product": prod, "raw": raw,
            "recorded_raw": float(rec.raw_qk(head, (query, query + 1, key, key + 1), batch)[0, 0]),
            "scale": float(rec.scale), "bias": bias, "softcap": rec.softcap,
            "scaled": (raw * rec.scale if rec.softcap is None else
                       rec.softcap * np.tanh(raw * rec.scale / rec.softcap)) + bias,
            "recorded_scaled": float(rec.scores(head, (query, query + 1, key, key + 1), batch)[0, 0]),
            "weight": float(rec.pattern(head, (query, query + 1, key, key + 1), batch)[0, 0]),
            "masked": not bool(rec.mask_for(batch, (query, query + 1, key, key + 1))[0, 0]),
            "d_head": int(q.shape[0])}
