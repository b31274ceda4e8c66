"""Per-head statistics of self-attention patterns [L, H, T, T] and a head-type label.

Row statistics are averaged over valid rows (rows with a visible key); for row q:
    entropy       −Σ_k a_qk·ln a_qk (nats)            max_weight     max_k a_qk
    mean_distance Σ_k a_qk·|q − k|                    sink_mass      a_q0 (first token)
    diagonal_mass a_qq                                prev_token     a_q,q−1 (rows q ≥ 1)
Duplicate-token and induction scores follow TransformerLens' head detectors and Olsson et al. 2022
("In-context Learning and Induction Heads") on a sequence repeated with period P.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from attnlab.analysis.attention.scores import check_patterns, valid_rows
from scipy.special import entr

STATS = ("entropy", "max_weight", "mean_distance", "sink_mass", "diagonal_mass", "prev_token")

# Head-type labels, first match wins (scores in [0, 1]; entropy relative to ln(#visible keys)).
LABEL_RULES = (
    ("induction", "induction", 0.4),
    ("duplicate-token", "duplicate_token", 0.4),
    ("previous-token", "prev_token", 0.5),
    ("broad/uniform", "entropy_ratio", 0.8),  # before sink: a short causal uniform head has sink mass > 0.5
    ("sink", "sink_mass", 0.5),
    ("self/diagonal", "diagonal_mass", 0.5),
)


def _mean_rows(x, valid) -> np.ndarray:
    """Mean of x over valid rows: [..., q] -> [...]; NaN where no row is valid."""
    n = valid.sum(-1)
    return np.divide(np.where(valid, x, 0).sum(-1), n, out=np.full(n.shape, np.nan), where=n > 0)


def _row_stats(a) -> dict:
    """Per-row statistics of a [..., T, T]: name -> [..., T]."""
    t = a.shape[-1]
    pos = np.arange(t)
    dist = np.abs(pos[:, None] - pos[None, :]).astype(a.dtype)  # [q, k] = |q − k|
    prev = np.diagonal(a, offset=-1, axis1=-2, axis2=-1)  # [..., T−1]: a_q,q−1 for q ≥ 1
    return {
        "entropy": entr(a).sum(-1),
        "max_weight": a.max(-1),
        "mean_distance": np.einsum("...qk,qk->...q", a, dist),
        "sink_mass": a[..., 0],
        "diagonal_mass": np.diagonal(a, axis1=-2, axis2=-1),
        "prev_token": np.concatenate([np.full(a.shape[:-2] + (1,), np.nan), prev], -1),
    }


def head_metrics(patterns, mask=None) -> dict:
    """Row statistics averaged over valid rows per head: [L, H, T, T] -> name -> [L, H].

    mask: bool [T, T] (True = may attend); without it a valid row is one that sums to 1.
    """
    a = check_patterns(patterns, ndim=4, square=True)
    out = {s: np.empty(a.shape[:2]) for s in STATS}
    for layer, p in enumerate(a):  # p [H, T, T]: one layer at a time keeps temporaries small
        valid = valid_rows(p, mask)  # [H, T]
        for s, x in _row_stats(p).items():
            out[s][layer] = _mean_rows(x, valid & ~np.isnan(x))
    return out


def _stripe(patterns, period: int, offset: int, start: int) -> np.ndarray:
    """Mean of a[i, i − offset] over rows i ≥ start + period: [..., T, T] -> [...]."""
    a = check_patterns(patterns, square=True)
    t = a.shape[-1]
    if period < 2 or start < 0 or start + period >= t:
        raise ValueError(f"need period ≥ 2 and start + period < T = {t}, got period {period}, start {start}")
    d = np.diagonal(a, offset=-offset, axis1=-2, axis2=-1)  # [..., T − offset]: a[i, i−offset], i ≥ offset
    return d[..., start + period - offset:].mean(-1)


def duplicate_token_score(patterns, period: int, start: int = 0) -> np.ndarray:
    """Mean attention from position i to i − P over the repeats, i ≥ start + P: [..., T, T] -> [...].

    On tokens x[start:start+P] repeated (x[i] = x[i−P]), a duplicate-token head attends to the
    earlier copy of the current token (TransformerLens `detect_head(..., "duplicate_token_head")`).
    `start` skips a prefix such as BOS.
    """
    return _stripe(patterns, period, period, start)


def induction_score(patterns, period: int, start: int = 0) -> np.ndarray:
    """Mean attention from position i to i − P + 1 over the repeats, i ≥ start + P: [..., T, T] -> [...].

    Olsson et al. 2022 / TransformerLens `induction_head`: on a repeated random sequence an
    induction head attends to the token after the earlier copy of the current token.
    """
    return _stripe(patterns, period, period - 1, start)


def head_label(row) -> str:
    """First rule of LABEL_RULES whose score reaches its threshold, else "mixed"."""
    for label, col, threshold in LABEL_RULES:
        v = row.get(col, np.nan)
        if v is not None and np.isfinite(v) and v >= threshold:
            return label
    return "mixed"


def _max_entropy(shape, mask) -> np.ndarray:
    """Mean over valid rows of ln(#visible keys): the entropy of a uniform head."""
    q, k = shape
    m = np.ones((q, k), bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), (q, k))
    n = m.sum(-1)
    return np.log(n[n > 0]).mean() if (n > 0).any() else np.nan


def head_statistics(patterns, mask=None, *, stack: str = "decoder", repeat_patterns=None,
                    period: int | None = None, repeat_start: int = 0) -> pd.DataFrame:
    """One row per (stack, layer, head) of self-attention patterns [L, H, T, T], with a label.

    Columns: stack, layer, head, entropy, max_weight, mean_distance, sink_mass, diagonal_mass,
    prev_token, duplicate_token, induction, label. Duplicate and induction scores come from
    `repeat_patterns` [L, H, T', T'] (the same model on a random sequence repeated with `period`,
    from `repeat_start`); with period but no repeat_patterns, `patterns` is taken to be that run;
    without period they are NaN. Labels: LABEL_RULES, where "broad/uniform" means entropy ≥ 0.8 ×
    ln(#visible keys) averaged over rows. Concatenate frames for encoder, decoder.
    """
    m = head_metrics(patterns, mask)
    n_layers, n_heads = m["entropy"].shape
    nan = np.full((n_layers, n_heads), np.nan)
    dup, ind = nan, nan
    if period is not None:
        rep = patterns if repeat_patterns is None else repeat_patterns
        dup, ind = duplicate_token_score(rep, period, repeat_start), induction_score(rep, period, repeat_start)
        if dup.shape != (n_layers, n_heads):
            raise ValueError(f"repeat_patterns must have {n_layers} layers and {n_heads} heads, got {dup.shape}")
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    df = pd.DataFrame({"stack": stack, "layer": layer.ravel(), "head": head.ravel(),
                       **{s: m[s].ravel() for s in STATS},
                       "duplicate_token": np.asarray(dup).ravel(), "induction": np.asarray(ind).ravel()})
    ratio = df["entropy"] / _max_entropy(np.shape(patterns)[-2:], mask)
    df["label"] = [head_label({**r, "entropy_ratio": e}) for r, e in zip(df.to_dict("records"), ratio)]
    return df
