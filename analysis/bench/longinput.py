"""Long inputs from lazy captures: one head's pooled overview and one query's rollout, in bounded memory.

Both read a fused run's records (q and k kept) through `model.longinput`, a block of query rows at a
time, and reuse the analysis maths (`pool_matrix`, `fuse_heads`, `rownorm`, `rollout_row`), so they
equal their whole-matrix versions:

    overview(rec, h)            == pool_matrix(where(mask, rec.pattern(h), nan), max_cells, how)
    rollout_query(recs, q)      == attention_rollout(stack of rec.pattern())[q]

without ever holding a T×T matrix per head (overview) or per layer (rollout, discard_ratio = 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analysis.pooling import _edges, pool_matrix
from analysis.rollout import fuse_heads, rollout_row, rownorm
from model.longinput import full_pattern, iter_pattern_rows, pattern_rows
from model.record import AttentionRecord


def overview(rec: AttentionRecord, head: int, max_cells: int = 512, how: str = "max", batch: int = 0,
             masked_nan: bool = True, block_rows: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's pattern pooled to at most max_cells × max_cells: (pooled [nq, nk], q_edges, k_edges).

    Rows are recomputed in groups of whole pooling blocks and pooled as they come, so memory is
    O(block_rows · T). `masked_nan`: masked cells are NaN (ignored by the pooling, as the app's
    heatmaps do); otherwise they count as the zeros the pattern holds."""
    if max_cells < 1:
        raise ValueError(f"max_cells must be ≥ 1, got {max_cells}")
    qe, ke = _edges(rec.q_len, max_cells), _edges(rec.k_len, max_cells)
    bq = int(qe[1] - qe[0])  # rows per pooled block
    step = max(bq, block_rows // bq * bq)  # whole pooled blocks per slab
    out = np.empty((len(qe) - 1, len(ke) - 1), dtype=np.float32)
    for q0 in range(0, rec.q_len, step):
        q1 = min(q0 + step, rec.q_len)
        rows = pattern_rows(rec, head, q0, q1, batch=batch).numpy()[0]  # [q1 − q0, K]
        if masked_nan and rec.mask is not None:
            rows = np.where(rec.mask_for(batch, (q0, q1, 0, rec.k_len)), rows, np.nan)
        full, rest = divmod(q1 - q0, bq)
        i = q0 // bq
        if full:  # [n, bq, K]: pool_matrix sees one row block per slice, and the same column edges
            pooled, _, _ = pool_matrix(rows[: full * bq].reshape(full, bq, -1), max_cells, how)
            out[i:i + full] = pooled[:, 0]
        if rest:  # the last, shorter block of rows
            out[i + full] = pool_matrix(rows[full * bq:], max_cells, how)[0][0]
    return out, qe, ke


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
                  discard_ratio: float = 0.0, block: int = 256, batch: int = 0) -> np.ndarray:
    """Row `query` of the attention rollout over `records` (layer order, self-attention), [T] float64.

    Streamed last layer first: r ← e_q·Â_L, then r ← r·Â_l, each Â_l computed only on the rows where
    r is non-zero, a block of rows at a time (for a causal model and query q: rows 0..q). With
    `discard_ratio` > 0 the discard needs whole rows ranked with their diagonal, so each layer is
    recomputed whole (one layer at a time) and handed to `analysis.rollout.rollout_row`.
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
    if discard_ratio:
        return rollout_row(lambda i: full_pattern(records[i], batch=batch), query, n_layers=len(records),
                           residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio)
    r = np.zeros(T)
    r[query] = 1.0
    for rec in reversed(records):
        live = np.flatnonzero(r)
        new = np.zeros(T)
        for q0, q1, k0, m in fused_layer_rows(rec, (int(live[0]), int(live[-1]) + 1), residual, head_fusion,
                                              block, batch):
            new[k0:k0 + m.shape[1]] += r[q0:q1] @ m
        r = new
    return r
