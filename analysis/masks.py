"""Attention masks as numpy bool [q, k] (True = may attend), and two mask studies.

Keys sit at positions 0..T−1 and queries at q_offset..q_offset+q_len−1; by default q_len = T and
q_offset = T − q_len, so the rows of a cached step line up bottom-right with the full matrix.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from model.softmax import masked_softmax


def _grid(T: int, q_len: int | None, q_offset: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Absolute query positions [q, 1] and key positions [1, k]."""
    q_len = T if q_len is None else q_len
    q_offset = T - q_len if q_offset is None else q_offset
    if T < 1 or q_len < 1 or q_offset < 0:
        raise ValueError(f"need T ≥ 1, q_len ≥ 1, q_offset ≥ 0; got T={T}, q_len={q_len}, q_offset={q_offset}")
    return np.arange(q_offset, q_offset + q_len)[:, None], np.arange(T)[None, :]


def causal(T: int, q_len: int | None = None, q_offset: int | None = None) -> np.ndarray:
    """Query i sees keys j ≤ i (Vaswani et al. 2017, decoder self-attention): bool [q, T]."""
    q, k = _grid(T, q_len, q_offset)
    return k <= q


def bidirectional(T: int, q_len: int | None = None, q_offset: int | None = None) -> np.ndarray:
    """Every query sees every key (BERT, encoders): bool [q, T] of True."""
    q, k = _grid(T, q_len, q_offset)
    return np.broadcast_to(k >= 0, (q.shape[0], T)).copy()


def sliding_window(T: int, w: int, q_len: int | None = None, q_offset: int | None = None) -> np.ndarray:
    """Causal window (Longformer, Mistral): query i sees keys i−w+1..i, itself and w−1 earlier keys."""
    if w < 1:
        raise ValueError(f"window w must be ≥ 1, got {w}")
    q, k = _grid(T, q_len, q_offset)
    return (k <= q) & (q - k < w)


def prefix_lm(T: int, p: int, q_len: int | None = None, q_offset: int | None = None) -> np.ndarray:
    """Prefix LM (Raffel et al. 2020, T5): keys j < p are visible to every query, the rest causally."""
    if p < 0:
        raise ValueError(f"prefix length p must be ≥ 0, got {p}")
    q, k = _grid(T, q_len, q_offset)
    return (k <= q) | (k < p)


def padding(keys, T: int | None = None, q_len: int | None = None) -> np.ndarray:
    """Key-padding mask: padded KEYS are hidden from every query: bool [q, T] or [B, q, T].

    `keys` is a length or lengths [B] (right padding: keys j < length are real; needs T), or a bool
    [T] / [B, T] with True = real token (any padding side). The mask is per key, broadcast over
    queries. The classic confusion is a per-pair mask valid_q ∧ valid_k: it also hides every key
    from a padded query, a fully masked row (NaN with −inf softmax); padded query rows are instead
    computed and ignored downstream. Combine with another mask by `&`, e.g. causal(T) & padding(n, T).
    """
    keys = np.asarray(keys)
    if keys.dtype == bool:
        valid = keys
    elif np.issubdtype(keys.dtype, np.integer) and keys.ndim <= 1:
        if T is None:
            raise ValueError("padding from lengths needs T")
        if (keys < 0).any() or (keys > T).any():
            raise ValueError(f"lengths must be in 0..{T}, got {keys}")
        valid = np.arange(T) < keys[..., None]  # [T] or [B, T]
    else:
        raise ValueError("padding takes lengths (int or [B] ints) or a bool key mask [T] / [B, T]")
    if valid.ndim not in (1, 2) or (T is not None and valid.shape[-1] != T):
        raise ValueError(f"bool key mask must be [T] or [B, T] with T = {T}, got {valid.shape}")
    n_q = valid.shape[-1] if q_len is None else q_len
    return np.broadcast_to(valid[..., None, :], valid.shape[:-1] + (n_q, valid.shape[-1])).copy()


def custom(array) -> np.ndarray:
    """A user-given mask [q, k] as bool; accepts bool or 0/1 numbers, True/1 = may attend."""
    m = np.asarray(array)
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"a custom mask must be a 2-D [q, k] array, got shape {m.shape}")
    if m.dtype != bool:
        if not np.isin(m, (0, 1)).all():
            raise ValueError("a custom mask must be bool or contain only 0 and 1")
        m = m.astype(bool)
    return m


class MaskStudy(NamedTuple):
    pattern_a: np.ndarray  # [H, q, k]
    pattern_b: np.ndarray  # [H, q, k]
    output_a: np.ndarray  # [H, q, d_v]
    output_b: np.ndarray  # [H, q, d_v]
    max_dpattern: np.ndarray  # [H]  max |pattern_a − pattern_b|
    max_doutput: np.ndarray  # [H]  max |output_a − output_b|


def mask_study(q, k, v, mask_a, mask_b, scale: float | None = None, bias=None) -> MaskStudy:
    """Same weights, two masks: softmax(scale·QKᵀ + bias, mask)·V per mask and the per-head change.

    Vaswani et al. 2017 eq. 1; q [H, q, d], k [H, k, d], v [H, k, d_v]; scale defaults to 1/√d.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if not (q.ndim == k.ndim == v.ndim == 3 and k.shape[:2] == v.shape[:2]
            and q.shape[0] == k.shape[0] and q.shape[2] == k.shape[2]):
        raise ValueError(f"need q [H, q, d], k [H, k, d], v [H, k, d_v]; got {q.shape}, {k.shape}, {v.shape}")
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(0, 2, 1) * scale + (0 if bias is None else np.asarray(bias))  # [H, q, k]
    p_a, p_b = masked_softmax(scores, mask_a), masked_softmax(scores, mask_b)
    o_a, o_b = p_a @ v, p_b @ v  # [H, q, d_v]
    return MaskStudy(p_a, p_b, o_a, o_b, np.abs(p_a - p_b).max((-2, -1)), np.abs(o_a - o_b).max((-2, -1)))


class MaskVariants(NamedTuple):
    zero_after: np.ndarray  # softmax(s) with masked entries then set to 0; rows sum to < 1
    zero_renorm: np.ndarray  # zero_after with rows re-normalised
    neg_inf: np.ndarray  # softmax(s with −inf where masked)


def zero_after_softmax_vs_neg_inf(scores, mask) -> MaskVariants:
    """Three ways to mask: zero after softmax, zero and re-normalise, −inf before softmax.

    zero_renorm = e^{s_j}·m_j / Σ_j' e^{s_j'}·m_j' equals neg_inf exactly (up to rounding);
    zero_after leaks the masked keys into the denominator, so its rows sum to less than 1.
    Fully masked rows are zeros in all three.
    """
    s = np.asarray(scores, dtype=np.float64)
    m = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    zero_after = masked_softmax(s) * m
    total = zero_after.sum(-1, keepdims=True)
    zero_renorm = np.divide(zero_after, total, out=np.zeros_like(zero_after), where=total > 0)
    return MaskVariants(zero_after, zero_renorm, masked_softmax(s, m))
