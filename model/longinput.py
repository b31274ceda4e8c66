"""Exact pattern rows from a lazy AttentionRecord, a block of queries at a time, with torch.

A fused capture keeps q and k (O(T·d) per head) instead of the [H, T, T] pattern. These helpers
recompute rows of it on demand, exactly as `AttentionRecord.pattern` defines them
(softmax(scale·q·kᵀ (soft-capped) + bias) under the mask; masked entries 0, a fully masked row all 0), but with
torch's threaded kernels and a bounded footprint: one call holds `heads × rows × keys`, never the
whole layer unless asked. Keys that no row of a block may see (above a causal diagonal, before a
sliding window) are skipped: their weights are exactly 0.

Pooling and rollout over these blocks are analysis (numpy) and live in `analysis.attention.long_records`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch
from attnlab.model.record import AttentionRecord
from attnlab.model.softmax import masked_softmax_torch


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
    if not rec.has_mask:
        return 0, rec.k_len
    if rec.causal:
        return 0, q1
    cols = np.flatnonzero(rec.mask_for(batch, (q0, q1, 0, rec.k_len)).any(0))
    if cols.size == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def compute_device() -> str:
    """Where recomputed rows are computed: the GPU when there is one (q and k travel, O(T·d)), else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _rows(rec: AttentionRecord, hs: list[int], q0: int, q1: int, k0: int, k1: int, batch: int,
          device: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(pattern rows float32 [h, q, k], mask bool [q, k] or None) on `device`; a causal mask is built there."""

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    q = t(rec.q[batch, hs, q0:q1])  # [h, b, d]
    k = t(rec.keys(hs, batch, k0, k1))  # [h, kb, d] (per query head)
    s = torch.matmul(q, k.transpose(-2, -1)).mul_(float(np.float32(rec.scale)))  # [h, b, kb]
    if rec.softcap is not None:  # Gemma 2: cap·tanh(s/cap), as the model
        s = torch.tanh(s / rec.softcap) * rec.softcap
    if rec.bias is not None:
        s += t(rec.bias[hs, q0:q1, k0:k1])
    if not rec.has_mask:
        m = None
    elif rec.causal:  # query i sees keys 0..i: made on the device, no [q, k] array travels
        m = torch.arange(q0, q1, device=device)[:, None] >= torch.arange(k0, k1, device=device)[None, :]
    else:
        m = t(rec.mask_for(batch, (q0, q1, k0, k1)))  # [b, kb]
    return masked_softmax_torch(s, m, in_place=True), m


def _checked(rec: AttentionRecord, q0: int, q1: int | None, k0: int, k1: int | None) -> tuple[int, int]:
    q1 = rec.q_len if q1 is None else q1
    k1 = rec.k_len if k1 is None else k1
    if not (0 <= q0 < q1 <= rec.q_len and 0 <= k0 <= k1 <= rec.k_len):
        raise IndexError(f"rows {q0}:{q1}, columns {k0}:{k1} outside [0,{rec.q_len})×[0,{rec.k_len})")
    return q1, k1


@torch.no_grad()
def pattern_rows(rec: AttentionRecord, heads=None, q0: int = 0, q1: int | None = None, k0: int = 0,
                 k1: int | None = None, batch: int = 0, device: str | None = None) -> torch.Tensor:
    """Pattern rows q0..q1−1, columns k0..k1−1, of `heads` (int, list or None = all): float32
    [h, q, k] on the CPU (a single int head still gives a leading axis), computed on `device` (default
    `compute_device()`). Columns outside k0..k1 must carry no visible key for these rows (see
    `visible_columns`), or the softmax would miss them."""
    hs = _heads(rec, heads)
    q1, k1 = _checked(rec, q0, q1, k0, k1)
    if k1 == k0:
        return torch.zeros(len(hs), q1 - q0, 0)
    return _rows(rec, hs, q0, q1, k0, k1, batch, device or compute_device())[0].cpu()


@torch.no_grad()
def pooled_rows(rec: AttentionRecord, heads, q0: int, q1: int, k0: int, k1: int, bq: int, bk: int,
                how: str = "max", masked_nan: bool = True, batch: int = 0, device: str | None = None) -> np.ndarray:
    """`pattern_rows` pooled where they are computed into blocks of bq rows × bk columns, counted from (q0, k0):
    float32 [h, ⌈(q1−q0)/bq⌉, ⌈(k1−k0)/bk⌉], the max or mean of each block's cells. Cells past q1 or k1 are
    not counted, nor masked cells when `masked_nan` (else they count as the zeros the pattern holds); a block
    with no cell counted is NaN. Only the pooled blocks travel back from a GPU."""
    if how not in ("max", "mean"):
        raise ValueError(f"how must be 'max' or 'mean', got {how!r}")
    hs = _heads(rec, heads)
    q1, k1 = _checked(rec, q0, q1, k0, k1)
    device = device or compute_device()
    p, m = _rows(rec, hs, q0, q1, k0, k1, batch, device)  # [h, r, kb], [r, kb] or None
    h, r, kb = p.shape
    nr, nc = -(-r // bq), -(-kb // bk)
    cells = p.new_zeros(h, nr * bq, nc * bk)
    cells[:, :r, :kb] = p
    seen = torch.zeros(nr * bq, nc * bk, dtype=torch.bool, device=p.device)
    seen[:r, :kb] = True if (m is None or not masked_nan) else m
    cells, seen = cells.view(h, nr, bq, nc, bk), seen.view(1, nr, bq, nc, bk)  # [h, block row, row, block col, col]
    count = seen.sum((2, 4))  # [1, nr, nc]
    if how == "max":
        pooled = cells.masked_fill(~seen, float("-inf")).amax((2, 4))
    else:
        pooled = cells.masked_fill(~seen, 0.0).sum((2, 4)) / count.clamp(min=1)
    return pooled.masked_fill(count == 0, float("nan")).cpu().numpy()


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


# -- rᵀ·A: what each key receives when query rows are weighted by r --------------------------------------
def _flash_cpu():
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _fused_ok(rec: AttentionRecord, batch: int) -> str | None:
    """'causal' or 'none' when rᵀ·A can run on the fused CPU kernel (no bias; no mask or the plain
    square causal one), else None."""
    if rec.bias is not None or rec.softcap is not None or rec.q_len != rec.k_len or rec.q_offset != 0 or _flash_cpu() is None:
        return None
    if not rec.has_mask:
        return "none"
    if rec.causal:
        return "causal"
    m = rec.mask[min(batch, rec.mask.shape[0] - 1)]
    return "causal" if np.array_equal(m, np.tri(rec.q_len, dtype=bool)) else None


@torch.no_grad()
def _weighted_columns_fused(rec: AttentionRecord, r: np.ndarray, causal: bool, batch: int) -> np.ndarray:
    """rᵀ·A_h for every head from two fused-kernel passes, never forming A.

    (rᵀA)_j = Σ_i r_i·exp(s_ij − lse_i) = exp(log Σ_i exp(s_ij + log r_i − lse_i)), with s = scale·q·kᵀ.
    Pass 1: the kernel's log-sum-exp of each query row, lse_i. Pass 2: attention with the roles swapped
    (queries k_j, keys [q_i, (log r_i − lse_i)/scale] against [k_j, 1]) whose log-sum-exp is the
    answer; a causal "i ≥ j" becomes the kernel's causal mask by reversing both sequences.
    """
    flash = _flash_cpu()
    q = torch.from_numpy(np.ascontiguousarray(rec.q[batch]))[None]  # [1, H, T, d]
    k = torch.from_numpy(np.ascontiguousarray(rec.keys(None, batch)))[None]  # [1, H, T, d] (per query head)
    _, H, T, d = q.shape
    scale = float(rec.scale)
    width = -(-(d + 1) // 8) * 8  # head size + 1 for the row offsets, padded to a multiple of 8
    _, lse = flash(q, k, torch.zeros(1, H, T, d), 0.0, causal, scale=scale)  # [1, H, T]
    r32 = torch.from_numpy(np.asarray(r, dtype=np.float32))
    offset = torch.where(r32 > 0, torch.log(r32.clamp_min(torch.finfo(torch.float32).tiny)), -1e4) - lse[0]
    keys = torch.zeros(1, H, T, width)
    keys[..., :d] = q.flip(2)
    keys[..., d] = offset.flip(-1) / scale
    queries = torch.zeros(1, H, T, width)
    queries[..., :d] = k.flip(2)
    queries[..., d] = 1.0
    _, lse2 = flash(queries, keys, torch.zeros(1, H, T, width), 0.0, causal, scale=scale)
    return torch.exp(lse2[0].flip(-1).double()).numpy()  # [H, T]


def weighted_columns(rec: AttentionRecord, r: np.ndarray, block: int = 256, batch: int = 0,
                     fused: bool = True) -> np.ndarray:
    """rᵀ·A_h for every head: float64 [H, K], what each key receives when query row i is weighted by
    r_i ≥ 0. With no bias and no mask or the plain causal mask this runs on PyTorch's fused CPU
    attention kernel (two passes, no T×T tensor, float32 log/exp: ~1e-6 relative); otherwise, or
    when r has few non-zero rows, the pattern rows where r ≠ 0 are recomputed block by block."""
    r = np.asarray(r, dtype=np.float64)
    if r.shape != (rec.q_len,) or (r < 0).any():
        raise ValueError(f"r must be [{rec.q_len}] and non-negative")
    live = np.flatnonzero(r)
    out = np.zeros((rec.n_heads, rec.k_len))
    if live.size == 0:
        return out
    kind = _fused_ok(rec, batch) if fused else None
    if kind is not None and live.size * 8 >= rec.q_len:
        try:
            return _weighted_columns_fused(rec, r, kind == "causal", batch)
        except RuntimeError:  # a private kernel; fall back to blocks if this build lacks it
            pass
    for b in iter_pattern_rows(rec, None, block, batch, rows=(int(live[0]), int(live[-1]) + 1)):
        w = torch.from_numpy(r[b.q0:b.q1].astype(np.float32))[None, None]  # [1, 1, b]
        out[:, b.k0:b.k1] += torch.matmul(w, torch.from_numpy(b.rows))[:, 0].numpy()
    return out
