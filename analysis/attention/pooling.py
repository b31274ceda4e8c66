"""Downsampling large attention matrices for display; NaN marks masked cells and is ignored.

Pooling a [Tq, Tk] matrix to at most max_cells × max_cells uses blocks of b = ceil(T / max_cells)
rows (columns); block i covers [edges[i], edges[i+1]). A block's value is the max or mean of its
non-NaN cells; an all-NaN block stays NaN.
"""

from __future__ import annotations

import numpy as np


def pool_edges(n: int, max_cells: int) -> np.ndarray:
    """Block edges 0 = e_0 < e_1 < ... = n with block size ceil(n / max_cells)."""
    b = -(-n // max_cells)
    return np.append(np.arange(0, n, b), n)


def pool_matrix(m, max_cells: int = 512, how: str = "max") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pool m [..., Tq, Tk] into blocks: returns (pooled [..., nq, nk], q_edges [nq+1], k_edges [nk+1])."""
    if how not in ("max", "mean"):
        raise ValueError(f"how must be 'max' or 'mean', got {how!r}")
    if max_cells < 1:
        raise ValueError(f"max_cells must be ≥ 1, got {max_cells}")
    m = np.asarray(m)
    m = m if np.issubdtype(m.dtype, np.floating) else m.astype(np.float64)
    if m.ndim < 2 or 0 in m.shape[-2:]:
        raise ValueError(f"pool_matrix needs a non-empty [..., Tq, Tk] matrix, got shape {m.shape}")
    (tq, tk), lead = m.shape[-2:], m.shape[:-2]
    qe, ke = pool_edges(tq, max_cells), pool_edges(tk, max_cells)
    bq, bk = int(qe[1] - qe[0]), int(ke[1] - ke[0])
    nq, nk = len(qe) - 1, len(ke) - 1
    padded = np.full(lead + (nq * bq, nk * bk), np.nan, dtype=m.dtype)
    padded[..., :tq, :tk] = m
    blocks = padded.reshape(lead + (nq, bq, nk, bk))  # [..., nq, bq, nk, bk]
    seen = ~np.isnan(blocks)
    count = seen.sum((-3, -1))  # [..., nq, nk]
    if how == "max":
        pooled = np.where(seen, blocks, -np.inf).max((-3, -1))
    else:
        pooled = np.divide(np.where(seen, blocks, 0).sum((-3, -1)), count, out=np.zeros(count.shape, m.dtype),
                           where=count > 0)
    return np.where(count > 0, pooled, np.nan), qe, ke


def window(m, q0: int, q1: int, k0: int, k1: int) -> np.ndarray:
    """Rows q0..q1−1 and columns k0..k1−1 of m [..., Tq, Tk] (a view): [..., q1−q0, k1−k0]."""
    m = np.asarray(m)
    tq, tk = m.shape[-2:]
    if not (0 <= q0 < q1 <= tq and 0 <= k0 < k1 <= tk):
        raise ValueError(f"window rows {q0}:{q1}, cols {k0}:{k1} must be non-empty inside a {tq}×{tk} matrix")
    return m[..., q0:q1, k0:k1]
