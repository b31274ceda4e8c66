"""Exact pattern rows from a lazy AttentionRecord, a block of queries at a time, with torch.

A fused capture keeps q and k (O(T·d) per head) instead of the [H, T, T] pattern. These helpers
recompute rows of it on demand, exactly as `AttentionRecord.pattern` defines them
(softmax(scale·q·kᵀ + bias) under the mask; masked entries 0, a fully masked row all 0), but with
torch's threaded kernels and a bounded footprint: one call holds `heads × rows × keys`, never the
whole layer unless asked. Keys that no row of a block may see (above a causal diagonal, before a
sliding window) are skipped: their weights are exactly 0.

Pooling and rollout over these blocks are analysis (numpy) and live in `analysis.bench.longinput`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from model.record import AttentionRecord


class RowBlock(NamedTuple):
    q0: int  # first query row of the block
    q1: int  # one past the last row
    k0: int  # first key column held; every column before it is exactly 0 for these rows
    k1: int  # one past the last column held; every column from it on is exactly 0
    rows: np.ndarray  # float32 [h, q1 − q0, k1 − k0]


def _heads(rec: AttentionRecord, heads) -> list[int]:
    if heads is None:
        return list(range(rec.n_heads))
    hs = [heads] if isinstance(heads, (int, np.integer)) else [int(h) for h in heads]
    for h in hs:
        if not 0 <= h < rec.n_heads:
            raise IndexError(f"head {h} out of range 0..{rec.n_heads - 1}")
    return hs


def visible_columns(rec: AttentionRecord, q0: int, q1: int, batch: int = 0) -> tuple[int, int]:
    """(k0, k1): the smallest column range holding every key rows q0..q1−1 may attend to."""
    if rec.mask is None:
        return 0, rec.k_len
    cols = np.flatnonzero(rec.mask_for(batch, (q0, q1, 0, rec.k_len)).any(0))
    if cols.size == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


@torch.no_grad()
def pattern_rows(rec: AttentionRecord, heads=None, q0: int = 0, q1: int | None = None, k0: int = 0,
                 k1: int | None = None, batch: int = 0) -> torch.Tensor:
    """Pattern rows q0..q1−1, columns k0..k1−1, of `heads` (int, list or None = all): float32
    [h, q, k] (a single int head still gives a leading axis). Columns outside k0..k1 must carry no
    visible key for these rows (see `visible_columns`), or the softmax would miss them."""
    hs = _heads(rec, heads)
    q1 = rec.q_len if q1 is None else q1
    k1 = rec.k_len if k1 is None else k1
    if not (0 <= q0 < q1 <= rec.q_len and 0 <= k0 <= k1 <= rec.k_len):
        raise IndexError(f"rows {q0}:{q1}, columns {k0}:{k1} outside [0,{rec.q_len})×[0,{rec.k_len})")
    if k1 == k0:
        return torch.zeros(len(hs), q1 - q0, 0)
    q = torch.from_numpy(np.ascontiguousarray(rec.q[batch, hs, q0:q1]))  # [h, b, d]
    k = torch.from_numpy(np.ascontiguousarray(rec.k[batch, hs, k0:k1]))  # [h, kb, d]
    s = torch.matmul(q, k.transpose(-2, -1)).mul_(np.float32(rec.scale))  # [h, b, kb]
    if rec.bias is not None:
        s += torch.from_numpy(np.ascontiguousarray(rec.bias[hs, q0:q1, k0:k1]))
    if rec.mask is None:
        return torch.softmax(s, dim=-1)
    m = torch.from_numpy(np.ascontiguousarray(rec.mask_for(batch, (q0, q1, k0, k1))))  # [b, kb]
    p = torch.softmax(s.masked_fill_(~m, float("-inf")), dim=-1)
    dead = ~m.any(-1, keepdim=True)  # rows with no visible key: softmax of all −inf is NaN
    return p.masked_fill_(dead, 0.0) if bool(dead.any()) else p


def iter_pattern_rows(rec: AttentionRecord, heads=None, block: int = 256, batch: int = 0, rows=None,
                      trim: bool = True, keep_diagonal: bool = False) -> Iterator[RowBlock]:
    """Row blocks of `heads`' pattern, top to bottom (or over `rows` = (start, stop)).

    `trim` skips columns no row of the block may see (exact zeros); `keep_diagonal` keeps columns
    q0..q1−1 inside the block anyway (rollout adds the identity there)."""
    if block < 1:
        raise ValueError(f"block must be ≥ 1, got {block}")
    start, stop = rows if rows is not None else (0, rec.q_len)
    for q0 in range(start, stop, block):
        q1 = min(q0 + block, stop)
        k0, k1 = visible_columns(rec, q0, q1, batch) if trim else (0, rec.k_len)
        if keep_diagonal:
            k0, k1 = (q0, q1) if k1 == k0 else (min(k0, q0), max(k1, min(q1, rec.k_len)))
        yield RowBlock(q0, q1, k0, k1, pattern_rows(rec, heads, q0, q1, k0, k1, batch).numpy())


def full_pattern(rec: AttentionRecord, heads=None, block: int = 512, batch: int = 0) -> np.ndarray:
    """The whole pattern of `heads` as float32 [h, q, k], filled block by block (equals
    `rec.pattern(...)` up to float rounding; faster on long inputs)."""
    hs = _heads(rec, heads)
    out = np.zeros((len(hs), rec.q_len, rec.k_len), dtype=np.float32)
    for b in iter_pattern_rows(rec, hs, block, batch):
        out[:, b.q0:b.q1, b.k0:b.k1] = b.rows
    return out
