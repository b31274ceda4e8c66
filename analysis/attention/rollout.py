"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

Layer l's attention, heads fused, with the residual stream as an identity path:
    Â_l = rownorm(residual·I + (1−residual)·A_l)
and the rollout is the product from the first layer up,
    R = Â_L ··· Â_2 · Â_1,
so R[q, k] is the share of output position q traced back to input token k. Rows are queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
from attnlab.analysis.attention.scores import check_patterns

FUSIONS = {"mean": np.mean, "max": np.max, "min": np.min}


def fuse_heads(a, head_fusion: str = "mean") -> np.ndarray:
    """Fuse heads elementwise by mean, max or min: [..., H, q, k] -> [..., q, k]."""
    if head_fusion not in FUSIONS:
        raise ValueError(f"head_fusion must be one of {', '.join(FUSIONS)}, got {head_fusion!r}")
    return FUSIONS[head_fusion](a, axis=-3)


def discard_smallest(a, ratio: float, keep_diagonal: bool = True) -> np.ndarray:
    """Zero the floor(ratio·k) smallest weights of each row of a [..., q, k]; never the diagonal.

    As in Abnar & Zuidema's and Gildenblat's ViT code (`discard_ratio`), but per row.
    """
    if not 0 <= ratio <= 1:
        raise ValueError(f"discard_ratio must be in [0, 1], got {ratio}")
    a = np.array(a, dtype=np.float64)
    nq, nk = a.shape[-2:]
    n = min(int(ratio * nk), nk - 1 if keep_diagonal else nk)
    if n == 0:
        return a
    ranked = a.copy()
    if keep_diagonal:
        d = np.arange(min(nq, nk))
        ranked[..., d, d] = np.inf  # the diagonal is never among the smallest
    drop = np.argpartition(ranked, n - 1, axis=-1)[..., :n]  # [..., q, n]
    np.put_along_axis(a, drop, 0.0, axis=-1)
    return a


def rownorm(m) -> np.ndarray:
    """Divide each row by its sum; a zero row stays zero."""
    s = m.sum(-1, keepdims=True)
    return np.divide(m, s, out=np.zeros(m.shape), where=s > 0)


def layer_matrix(a, residual: float = 0.5, head_fusion: str = "mean", discard_ratio: float = 0.0):
    """Â = rownorm(residual·I + (1−residual)·discard(fuse(A))): [..., H, T, T] -> [..., T, T]."""
    if not 0 <= residual <= 1:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    fused = discard_smallest(fuse_heads(a, head_fusion), discard_ratio)  # [..., T, T]
    return rownorm((1 - residual) * fused + residual * np.eye(fused.shape[-1]))


def attention_rollout(patterns, residual: float = 0.5, head_fusion: str = "mean",
                      discard_ratio: float = 0.0) -> np.ndarray:
    """Attention rollout R = Â_L ··· Â_1 of patterns [layers, heads, T, T]: returns [T, T].

    Abnar & Zuidema 2020, eq. Ã(l) = A(l)·Ã(l−1) with A(l) = 0.5·W_att + 0.5·I (residual=0.5).
    `head_fusion` ∈ {mean, max, min}; `discard_ratio` zeroes that share of the smallest fused
    weights per row (never the diagonal) before the residual is added and rows re-normalised.
    Rows of R sum to 1; causal patterns give a lower-triangular R.
    """
    a = check_patterns(patterns, ndim=4, square=True)
    mats = layer_matrix(a, residual, head_fusion, discard_ratio)  # [L, T, T]
    r = mats[0]
    for m in mats[1:]:
        r = m @ r  # R_l = Â_l · R_{l−1}
    return r


def _last_layer_first(layers, n_layers: int | None) -> Iterable:
    if isinstance(layers, np.ndarray):
        if layers.ndim != 4:
            raise ValueError(f"patterns must be [layers, heads, T, T], got shape {layers.shape}")
        return (layers[i] for i in reversed(range(layers.shape[0])))
    if callable(layers):
        if n_layers is None:
            raise ValueError("a callable of layers needs n_layers")
        return (layers(i) for i in reversed(range(n_layers)))
    return iter(layers)


def rollout_row(layers: np.ndarray | Callable[[int], np.ndarray] | Iterable[np.ndarray], query: int,
                n_layers: int | None = None, residual: float = 0.5, head_fusion: str = "mean",
                discard_ratio: float = 0.0) -> np.ndarray:
    """Row `query` of the rollout, streamed one layer at a time: r = e_q·Â_L·Â_{L−1} ··· Â_1, [T].

    Equals attention_rollout(...)[query] while holding one layer's [heads, T, T] at a time.
    `layers` is a [L, H, T, T] array; or a callable l -> [H, T, T] with `n_layers`, called for
    l = L−1 down to 0; or an iterable yielding [H, T, T] LAST LAYER FIRST.
    """
    r = None
    for a in _last_layer_first(layers, n_layers):
        a = check_patterns(a, ndim=3, square=True, name="layer patterns")
        m = layer_matrix(a, residual, head_fusion, discard_ratio)  # [T, T]
        if r is None:
            if not 0 <= query < m.shape[0]:
                raise ValueError(f"query {query} is outside 0..{m.shape[0] - 1}")
            r = m[query]  # e_q · Â_L
        elif m.shape[0] != r.shape[0]:
            raise ValueError(f"layers disagree on T: {m.shape[0]} vs {r.shape[0]}")
        else:
            r = r @ m
    if r is None:
        raise ValueError("no layers given")
    return r


class CrossRollout(NamedTuple):
    source: np.ndarray  # [T, S] relevance of each source (encoder input) token for target position t
    target: np.ndarray  # [T, T] relevance of each target (decoder input) token; [target | source] rows sum to 1


def cross_rollout(enc_patterns, dec_self_patterns, cross_patterns, residual: float = 0.5,
                  head_fusion: str = "mean", discard_ratio: float = 0.0) -> CrossRollout:
    """Encoder–decoder rollout: relevance of target and source input tokens for each target position.

    Rollout (Abnar & Zuidema 2020) carried through an encoder–decoder (Vaswani et al. 2017), in the
    spirit of Chefer et al. 2021's bi-modal rules. Patterns: encoder self [Le, H, S, S], decoder
    self [Ld, H, T, T], cross [Ld, H, T, S]. Keep M = [M_t | M_s], [T, T+S], starting at [I | 0]:
        R_enc = attention_rollout(encoder)                      # [S, S]
        self step l:   M ← D̂_l · M                              (D̂_l as in rollout)
        cross step l:  M ← rownorm([r·M_t | r·M_s + (1−r)·C_l·R_enc])
    with r = residual, C_l the fused, row-normalised cross attention. Assumes each decoder layer is
    self-attention then cross-attention, each with a residual, every layer reading the final encoder
    output, and MLPs and norms acting per token (ignored, as in rollout).
    """
    enc = check_patterns(enc_patterns, ndim=4, square=True, name="encoder patterns")
    dec = check_patterns(dec_self_patterns, ndim=4, square=True, name="decoder self patterns")
    cross = check_patterns(cross_patterns, ndim=4, name="cross patterns")
    (ld, _, t, _), s = dec.shape, enc.shape[-1]
    if cross.shape[0] != ld or cross.shape[-2:] != (t, s):
        raise ValueError(f"cross patterns must be [{ld}, H, {t}, {s}] to match decoder and encoder, "
                         f"got {cross.shape}")
    r_enc = attention_rollout(enc, residual, head_fusion, discard_ratio)  # [S, S]
    m_t, m_s = np.eye(t), np.zeros((t, s))
    for d, c in zip(dec, cross):
        d_hat = layer_matrix(d, residual, head_fusion, discard_ratio)  # [T, T]
        m_t, m_s = d_hat @ m_t, d_hat @ m_s
        c_hat = rownorm(discard_smallest(fuse_heads(c, head_fusion), discard_ratio, keep_diagonal=False))
        m = rownorm(np.concatenate([residual * m_t, residual * m_s + (1 - residual) * c_hat @ r_enc], -1))
        m_t, m_s = m[:, :t], m[:, t:]  # [T, T], [T, S]
    return CrossRollout(m_s, m_t)
