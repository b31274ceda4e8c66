"""The masked softmax, once in numpy and once in torch: −inf where the mask forbids attention, so masked
entries are exactly 0, and a fully masked row gives zeros (never NaN)."""

from __future__ import annotations

import numpy as np
import torch


def masked_softmax(x, mask=None, axis: int = -1) -> np.ndarray:
    """softmax(x) along `axis` with x = −inf where `mask` is False (numpy; float32 in, float32 out).

    x must be finite where the mask allows attention (pass the mask separately, never −inf baked in).
    """
    e = shifted_exp(x, mask, axis)
    s = e.sum(axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def shifted_exp(x, mask=None, axis: int = -1) -> np.ndarray:
    """exp(x − max x) along `axis`, 0 where `mask` is False: the numerators of masked_softmax (the row max
    subtracted for stability; a fully masked row gives zeros)."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), x.shape)
        x = np.where(mask, x, -np.inf)
    visible = x[mask] if mask is not None else x
    if not np.isfinite(visible).all():
        raise ValueError("scores must be finite where the mask allows attention")
    m = x.max(axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # fully masked row: exp(−inf − 0) = 0
    return np.exp(x - m)


def masked_softmax_torch(scores: torch.Tensor, mask: torch.Tensor | None = None, *,
                         in_place: bool = False, dead_rows: bool | None = None) -> torch.Tensor:
    """softmax over the last axis with −inf where `mask` (bool, broadcastable) is False (torch).

    `in_place` writes the −inf into `scores` itself (one [.., q, k] buffer fewer when nobody keeps them).
    `dead_rows`: whether a row may see no key at all (its softmax is NaN, returned as zeros): True zeroes such
    rows unconditionally, False trusts there are none (a causal mask always shows the query its own key),
    None looks (one device sync: the caller does not know).
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    masked = scores.masked_fill_(~mask, float("-inf")) if in_place else scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(masked, dim=-1)
    if dead_rows is False:
        return p
    dead = ~mask.any(-1, keepdim=True)  # rows with no visible key: a softmax of all −inf is NaN
    if not (dead_rows or bool(dead.any())):
        return p
    return p.masked_fill(dead, 0.0) if p.requires_grad else p.masked_fill_(dead, 0.0)  # softmax's backward reads p
