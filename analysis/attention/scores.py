"""Softmax basics and score scales: masked softmax, entropy, saturation, the 1/√d_k counterfactual.

Conventions (as in the model): scores are raw QKᵀ; scaled = raw·scale + bias; masks are bool
[.., q, k] with True = may attend; masked entries get −inf before softmax, so they are exactly 0
after it, and a fully masked row gives zeros, never NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from attnlab.model.softmax import masked_softmax
from scipy.special import entr

ROW_ATOL = 1e-3  # row sums of captured patterns may be off by this much (fp16/bf16 captures)


def check_patterns(patterns, ndim: int | None = None, square: bool = False, name: str = "patterns"):
    """Validate attention patterns [..., q, k]: finite, ≥ 0, every row sums to 1 (or 0: fully masked).

    Returns a float array (float32 stays float32). Raises ValueError naming what is wrong.
    """
    a = np.asarray(patterns)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if a.ndim < 2 or (ndim is not None and a.ndim != ndim):
        want = f"{ndim}-D" if ndim is not None else "at least 2-D"
        raise ValueError(f"{name} must be {want} [..., q, k], got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} must be square in its last two axes (self-attention), got {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty: shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or inf")
    if a.min() < -ROW_ATOL:
        raise ValueError(f"{name} has negative weights (min {a.min():.3g})")
    s = a.sum(-1, dtype=np.float64)
    bad = ~((np.abs(s - 1) <= ROW_ATOL) | (np.abs(s) <= ROW_ATOL))
    if bad.any():
        raise ValueError(f"{name} rows must sum to 1 (or 0 when fully masked); {int(bad.sum())} rows do not, "
                         f"e.g. {s[bad].flat[0]:.6g}")
    return a


def row_entropy(patterns) -> np.ndarray:
    """Shannon entropy of each row in nats, H_q = −Σ_k a_qk·ln a_qk (0·ln 0 = 0): [..., q, k] -> [..., q]."""
    return entr(np.asarray(patterns)).sum(-1)


def valid_rows(patterns, mask=None) -> np.ndarray:
    """Rows with at least one visible key (from the mask, else rows that sum to ~1): [..., q] bool."""
    a = np.asarray(patterns)
    if mask is not None:
        return np.broadcast_to(np.asarray(mask, dtype=bool).any(-1), a.shape[:-1])
    return a.sum(-1) > 0.5


def effective_keys(patterns, mask=None) -> np.ndarray:
    """Effective number of attended keys per row, exp(H_q) (perplexity; Hill number of order 1).

    1 for a one-hot row, n for a uniform row over n keys; NaN where a row has no visible key.
    """
    a = check_patterns(patterns)
    return np.where(valid_rows(a, mask), np.exp(row_entropy(a)), np.nan)


def saturation(patterns, mask=None, thresholds=(0.9, 0.99)) -> np.ndarray:
    """Share of valid rows whose max weight exceeds each threshold: [..., q, k] -> [..., len(thresholds)].

    A saturated softmax (max_k a_qk → 1) passes almost no gradient to the other keys.
    """
    a = check_patterns(patterns)
    valid = valid_rows(a, mask)  # [..., q]
    top = a.max(-1)  # [..., q]
    n = valid.sum(-1)
    out = [np.divide(((top > t) & valid).sum(-1), n, out=np.full(n.shape, np.nan), where=n > 0)
           for t in thresholds]
    return np.stack(out, -1)


def _masked_moments(x, m) -> tuple[np.ndarray, ...]:
    """Mean, std, min, max over the last two axes of x where m is True: [H, q, k] -> 4 × [H]."""
    n = m.sum((-2, -1))
    mean = np.divide(np.where(m, x, 0).sum((-2, -1)), n, out=np.full(n.shape, np.nan), where=n > 0)
    dev = np.where(m, x - mean[:, None, None], 0)
    std = np.sqrt(np.divide((dev**2).sum((-2, -1)), n, out=np.full(n.shape, np.nan), where=n > 0))
    lo = np.where(n > 0, np.min(x, axis=(-2, -1), where=m, initial=np.inf), np.nan)
    hi = np.where(n > 0, np.max(x, axis=(-2, -1), where=m, initial=-np.inf), np.nan)
    return mean, std, lo, hi


def _sites(x) -> dict:
    """A [L, H, q, k] array, a sequence of [H, q, k] or a mapping name -> [H, q, k], as a dict."""
    if isinstance(x, Mapping):
        return dict(x)
    if (isinstance(x, np.ndarray) and x.ndim == 4) or isinstance(x, Sequence):
        return dict(enumerate(x))
    raise ValueError("raw scores must be [L, H, q, k], a sequence of [H, q, k] or a mapping site -> [H, q, k]")


def _per_site(v, keys):
    """A per-site value given once (shared) or as a sequence/mapping aligned with the sites."""
    if isinstance(v, Mapping):
        return {s: v[s] for s in keys}
    if isinstance(v, Sequence) and not isinstance(v, str):
        if len(v) != len(keys):
            raise ValueError(f"got {len(v)} per-site values for {len(keys)} sites")
        return dict(zip(keys, v))
    return dict.fromkeys(keys, v)


def soft_cap(x, cap: float | None):
    """cap·tanh(x/cap) (Gemma 2's soft-capping: scores stay within ±cap), or x when cap is None."""
    return x if cap is None else np.tanh(x / cap) * cap


def score_steps_table(steps, mask=None) -> pd.DataFrame:
    """One row per step from q·kᵀ to the pre-softmax score (AttentionRecord.score_steps for one head, each [q, k]):
    mean, std, min and max over the visible pairs."""
    rows = []
    for name, x in steps:
        x = np.asarray(x, dtype=np.float64)
        m = np.ones(x.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), x.shape)
        mean, std, lo, hi = (v[0] for v in _masked_moments(x[None], m[None]))
        rows.append({"step": name, "mean": mean, "std": std, "min": lo, "max": hi})
    return pd.DataFrame(rows)


def score_stats(raw, scale, mask=None, bias=None, softcap=None) -> pd.DataFrame:
    """Per head mean, std, min and max of raw scores QKᵀ and of scaled scores raw·scale + bias.

    Vaswani et al. 2017, §3.2.1: for q, k with unit-variance entries, q·k has variance d_k, hence
    the 1/√d_k scale. `raw` is [L, H, q, k], a sequence or a mapping of per-site [H, q, k]; `scale`,
    `mask` (bool, broadcast to [H, q, k]) and `bias` are shared (a number or an array) or given per
    site (a list or mapping). Masked entries are excluded. One row per (site, head). `softcap` (Gemma 2):
    the scaled scores are soft-capped before the bias, as the model does.
    """
    sites = _sites(raw)
    scales, masks, biases = (_per_site(v, list(sites)) for v in (scale, mask, bias))
    rows = []
    for s, r in sites.items():
        r = np.asarray(r, dtype=np.float64)
        if r.ndim != 3 or not np.isfinite(r).all():
            raise ValueError(f"raw scores of site {s!r} must be finite [H, q, k], got shape {r.shape}")
        m = np.ones(r.shape, bool) if masks[s] is None else np.broadcast_to(np.asarray(masks[s], bool), r.shape)
        scaled = soft_cap(r * float(scales[s]), softcap) + (0 if biases[s] is None else np.asarray(biases[s]))
        raw_m, scaled_m = _masked_moments(r, m), _masked_moments(scaled, m)
        for h in range(r.shape[0]):
            rows.append({"site": s, "head": h,
                         **{f"raw_{k}": v[h] for k, v in zip(("mean", "std", "min", "max"), raw_m)},
                         **{f"scaled_{k}": v[h] for k, v in zip(("mean", "std", "min", "max"), scaled_m)}})
    return pd.DataFrame(rows)


class Counterfactual(NamedTuple):
    scaled: np.ndarray  # softmax((raw·scale + bias)/τ)  [..., q, k]
    unscaled: np.ndarray  # softmax((raw + bias)/τ): the 1/√d_k factor left out  [..., q, k]
    scaled_entropy: np.ndarray  # nats per row [..., q]
    unscaled_entropy: np.ndarray  # nats per row [..., q]


def counterfactual_softmax(raw, scale: float, tau: float = 1.0, mask=None, bias=None,
                           softcap: float | None = None) -> Counterfactual:
    """Patterns with and without the 1/√d_k factor, at temperature τ, and their row entropies.

    Vaswani et al. 2017, §3.2.1: without the scale, logits grow like √d_k and the softmax
    saturates (entropy → 0, vanishing gradients). scaled = softmax((raw·scale + bias)/τ),
    unscaled = softmax((raw + bias)/τ); masked entries are 0, fully masked rows are zeros. A soft-capped model
    (`softcap`) caps both before the bias, as it does its own scores.
    """
    if not tau > 0:
        raise ValueError(f"temperature tau must be > 0, got {tau}")
    raw = np.asarray(raw, dtype=np.float64)
    b = 0 if bias is None else np.asarray(bias, dtype=np.float64)
    scaled = masked_softmax((soft_cap(raw * scale, softcap) + b) / tau, mask)
    unscaled = masked_softmax((soft_cap(raw, softcap) + b) / tau, mask)
    return Counterfactual(scaled, unscaled, row_entropy(scaled), row_entropy(unscaled))
