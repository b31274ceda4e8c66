"""Long inputs from lazy captures: one head's pooled overview and one query's rollout, in bounded memory.

Both read a fused run's records (q and k kept) through `model.longinput`, a block of query rows at a
time, and reuse the analysis maths (`pool_matrix`, `fuse_heads`, `rownorm`, `rollout_row`), so they
equal their whole-matrix versions:

    overview(rec, h)            == pool_matrix(where(mask, rec.pattern(h), nan), max_cells, how)
    exact_window(rec, h, ...)   == rec.pattern(h)[q0:q1, k0:k1]
    rollout_query(recs, q)      == attention_rollout(stack of rec.pattern())[q]

without ever holding a T×T matrix per head (overview, window) or per layer (rollout, discard_ratio = 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from attnlab.analysis.attention.pooling import pool_edges
from attnlab.analysis.attention.rollout import fuse_heads, rollout_row, rownorm
from attnlab.model.longinput import (
    full_pattern,
    iter_pattern_rows,
    pattern_rows,
    pooled_rows,
    visible_columns,
    weighted_columns,
)
from attnlab.model.record import AttentionRecord


def overview(rec: AttentionRecord, head=0, max_cells: int = 512, how: str = "max", batch: int = 0,
             masked_nan: bool = True, block_rows: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A head's pattern pooled to at most max_cells × max_cells: (pooled [nq, nk], q_edges, k_edges);
    `head` a list (or None: all heads) gives [h, nq, nk], pooled from one recomputation of the rows.

    Rows are recomputed in slabs of whole pooling blocks and pooled as they come, so memory is
    O(heads · block_rows · T). `masked_nan`: masked cells are NaN (ignored by the pooling, as the app's
    heatmaps do); otherwise they count as the zeros the pattern holds."""
    if max_cells < 1:
        raise ValueError(f"max_cells must be ≥ 1, got {max_cells}")
    single = isinstance(head, (int, np.integer))
    heads = [int(head)] if single else list(range(rec.n_heads)) if head is None else [int(h) for h in head]
    qe, ke = pool_edges(rec.q_len, max_cells), pool_edges(rec.k_len, max_cells)
    bq, bk = int(qe[1] - qe[0]), int(ke[1] - ke[0])  # cells per pooled block
    nk, K = len(ke) - 1, rec.k_len
    step = max(bq, block_rows // bq * bq)  # whole pooled row blocks per slab
    # blocks no row of a slab may see are NaN (masked) or 0 (masked_nan=False) without computing them
    out = np.full((len(heads), len(qe) - 1, nk), np.nan if masked_nan else 0.0, dtype=np.float32)
    for q0 in range(0, rec.q_len, step):
        q1 = min(q0 + step, rec.q_len)
        k0, k1 = visible_columns(rec, q0, q1, batch)
        if k1 == k0:
            continue
        c0, c1 = k0 // bk, -(-k1 // bk)  # the column blocks holding every visible key
        cells = pooled_rows(rec, heads, q0, q1, c0 * bk, min(c1 * bk, K), bq, bk, how, masked_nan, batch)
        out[:, q0 // bq:q0 // bq + cells.shape[1], c0:c1] = cells  # [h, row blocks of this slab, c1 − c0]
    return (out[0] if single else out), qe, ke


def exact_window(rec: AttentionRecord, head: int, q0: int, q1: int, k0: int, k1: int,
                 batch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows q0..q1−1 and columns k0..k1−1 of one head's pattern at full resolution: (float32 [q, k], mask
    bool [q, k]). The softmax runs over every key these rows may see, not only the window's columns, so
    the values are the pattern's own (masked cells exactly 0); memory is O(rows · T)."""
    if not (0 <= q0 < q1 <= rec.q_len and 0 <= k0 < k1 <= rec.k_len):
        raise ValueError(f"window rows {q0}:{q1}, columns {k0}:{k1} must be non-empty inside "
                         f"[0, {rec.q_len})×[0, {rec.k_len})")
    out = np.zeros((q1 - q0, k1 - k0), dtype=np.float32)
    v0, v1 = visible_columns(rec, q0, q1, batch)
    a, b = max(k0, v0), min(k1, v1)  # the window's columns that any of its rows may see
    if b > a:
        rows = pattern_rows(rec, int(head), q0, q1, v0, v1, batch).numpy()[0]  # [q, v1 − v0]
        out[:, a - k0:b - k0] = rows[:, a - v0:b - v0]
    return out, np.array(rec.mask_for(batch, (q0, q1, k0, k1)), dtype=bool)


def fused_layer_rows(rec: AttentionRecord, rows: tuple[int, int], residual: float = 0.5, head_fusion: str = "mean",
                     block: int = 256, batch: int = 0):
    """Yield (q0, q1, k0, Â[q0:q1, k0:k1]) of the rollout layer matrix Â = rownorm(r·I + (1−r)·fuse(A)),
    block by block over `rows`; columns outside k0..k1 are exactly 0."""
    for b in iter_pattern_rows(rec, None, block, batch, rows=rows, keep_diagonal=True):
        m = (1 - residual) * fuse_heads(b.rows, head_fusion).astype(np.float64)  # [q, kb]
        d = np.arange(b.q0, b.q1)
        m[d - b.q0, d - b.k0] += residual
        yield b.q0, b.q1, b.k0, rownorm(m)


def rollout_query(records: Sequence[AttentionRecord], query: int, residual: float = 0.5, head_fusion: str = "mean",
                  discard_ratio: float = 0.0, block: int = 256, batch: int = 0, fused: bool = True) -> np.ndarray:
    """Row `query` of the attention rollout over `records` (layer order, self-attention), [T] float64;
    equals `attention_rollout(patterns, ...)[query]` up to float rounding.

    Streamed last layer first: x ← e_q·Â_L, then x ← x·Â_l, holding one layer's rows at a time. With
    ρ = residual and mean fusion, the rows of a softmax sum to 1, so Â_l = ρ·I + (1−ρ)·mean_h A_h needs
    no re-normalising (a fully masked row is e_i) and x·Â_l = ρ·x + (1−ρ)·mean_h(xᵀA_h), which
    `weighted_columns` gets from fused kernels without a T×T tensor. Max/min fusion: Â_l block by
    block over the rows where x ≠ 0.
    `discard_ratio` > 0 ranks whole rows with their diagonal: each layer is recomputed whole (one at a
    time) and handed to `analysis.attention.rollout.rollout_row`.
    """
    if not records:
        raise ValueError("no layers given")
    T = records[0].q_len
    if any(r.q_len != T or r.k_len != T for r in records):
        raise ValueError("rollout needs square self-attention records of one length")
    if not 0 <= query < T:
        raise ValueError(f"query {query} is outside 0..{T - 1}")
    if not 0 <= residual <= 1:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    fuse_heads(np.zeros((1, 1, 1)), head_fusion)  # validates the name
    if discard_ratio:
        return rollout_row(lambda i: full_pattern(records[i], batch=batch), query, n_layers=len(records),
                           residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio)
    r = np.zeros(T)
    r[query] = 1.0
    for rec in reversed(records):
        if head_fusion == "mean":
            received = fuse_heads(weighted_columns(rec, r, block, batch, fused)[:, None, :], "mean")[0]  # [T]
            dead = ~rec.mask_for(batch).any(-1) if rec.has_mask else np.zeros(T, bool)
            r = np.where(dead, r, residual * r) + (1 - residual) * received
        else:
            live = np.flatnonzero(r)
            new = np.zeros(T)
            for q0, q1, k0, m in fused_layer_rows(rec, (int(live[0]), int(live[-1]) + 1), residual, head_fusion,
                                                  block, batch):
                new[k0:k0 + m.shape[1]] += r[q0:q1] @ m
            r = new
    return r
