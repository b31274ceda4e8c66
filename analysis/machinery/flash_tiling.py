"""Flash attention's tiled computation, step by step, on one real head (Dao et al. 2022, FlashAttention).

The queries are cut into blocks of `block_q` rows and the keys and values into blocks of `block_k`. For one
query block the key/value blocks arrive one at a time; each row keeps three running quantities instead of a
row of T weights:
  m  the largest score seen so far,
  l  the sum of exp(score − m) seen so far,
  acc  the sum of exp(score − m)·v seen so far  [d_head].
When a block brings a larger maximum m', the old sums are rescaled by exp(m − m') before the block's own
terms are added (the online softmax, Milakov & Gimelshein 2018); after the last block, output = acc / l, the
softmax(scores)·V of the full computation. Only one block_q × block_k tile of scores exists at a time, never
the T × T matrix. Blocks whose every cell is masked (above a causal diagonal) are skipped, as the kernels do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.softmax import masked_softmax


@dataclass
class TileStep:
    """One key/value block arriving at one query block (rows r0:r1, keys c0:c1)."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    scores: np.ndarray  # float64 [bq, bk] this tile's scaled scores, −inf where masked
    block_max: np.ndarray  # float64 [bq] the tile's row maxima (−inf: a row with nothing visible here)
    m_before: np.ndarray  # float64 [bq] running max before the tile
    m_after: np.ndarray  # float64 [bq]
    rescale: np.ndarray  # float64 [bq] exp(m_before − m_after): what the old l and acc are multiplied by
    l_before: np.ndarray  # float64 [bq] running sum of exponentials before the tile
    l_after: np.ndarray  # float64 [bq]
    out_after: np.ndarray  # float64 [bq, d_head] acc / l after the tile: the partial output (0 where l = 0)


@dataclass
class Tiling:
    """Every tile of one head's tiled attention, its output and the full softmax's output beside it."""

    T: int
    S: int  # keys
    d_head: int
    block_q: int
    block_k: int
    steps: list[TileStep]
    skipped: list[tuple[tuple[int, int], tuple[int, int]]]  # (rows, cols) of fully masked tiles, never computed
    output: np.ndarray  # float64 [T, d_head] acc / l after the last tile
    reference: np.ndarray  # float64 [T, d_head] softmax(scores, mask)·V over the whole T × S matrix

    @property
    def max_abs_diff(self) -> float:
        return float(np.abs(self.output - self.reference).max())

    @property
    def tile_cells(self) -> int:
        """Scores alive at once: one tile."""
        return self.block_q * self.block_k

    @property
    def full_cells(self) -> int:
        """Scores of the full matrix (what eager attention holds per head)."""
        return self.T * self.S

    def steps_of(self, q_block: int) -> list[TileStep]:
        """The tiles of query block `q_block` in arrival order."""
        r0 = q_block * self.block_q
        return [s for s in self.steps if s.rows[0] == r0]


def tiled_attention(q, k, v, mask=None, scale: float | None = None, block_q: int = 16,
                    block_k: int = 16, softcap: float | None = None, bias=None) -> Tiling:
    """Tiled attention of one head: q [T, d], k and v [S, d], mask bool [T, S] (True = may attend), scale
    (default 1/√d), an optional soft-cap (Gemma 2: cap·tanh(s/cap) on the scaled scores) and additive bias [T, S]
    (ALiBi, T5), both applied tile by tile as FlashAttention-2 does. Computed in float64; the reference is
    masked_softmax over the whole matrix."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    T, d = q.shape
    S = k.shape[0]
    if block_q < 1 or block_k < 1:
        raise ValueError("block sizes must be at least 1")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    mask = np.ones((T, S), bool) if mask is None else np.asarray(mask, bool)
    bias = None if bias is None else np.asarray(bias, dtype=np.float64)  # [T, S]

    def score(rows: slice, cols: slice) -> np.ndarray:  # [rows, cols] pre-softmax scores, before the mask
        x = scale * q[rows] @ k[cols].T
        if softcap is not None:
            x = softcap * np.tanh(x / softcap)
        return x if bias is None else x + bias[rows, cols]

    out = np.zeros((T, d))
    steps, skipped = [], []
    for r0 in range(0, T, block_q):
        r1 = min(r0 + block_q, T)
        m = np.full(r1 - r0, -np.inf)  # [bq]
        lsum = np.zeros(r1 - r0)  # [bq]
        acc = np.zeros((r1 - r0, d))  # [bq, d]
        for c0 in range(0, S, block_k):
            c1 = min(c0 + block_k, S)
            vis = mask[r0:r1, c0:c1]  # [bq, bk]
            if not vis.any():
                skipped.append(((r0, r1), (c0, c1)))
                continue
            s = np.where(vis, score(slice(r0, r1), slice(c0, c1)), -np.inf)  # [bq, bk], only this tile
            bmax = s.max(1)
            m_new = np.maximum(m, bmax)
            ref = np.where(np.isfinite(m_new), m_new, 0.0)  # a row with nothing visible yet keeps l = 0, acc = 0
            alpha = np.exp(m - ref)  # [bq]; 0 on a row's first visible block (m = −inf)
            p = np.exp(s - ref[:, None])  # [bq, bk]; exactly 0 where masked
            l_new = alpha * lsum + p.sum(1)
            acc = alpha[:, None] * acc + p @ v[c0:c1]  # [bq, d]
            part = np.divide(acc, l_new[:, None], out=np.zeros_like(acc), where=l_new[:, None] > 0)  # [bq, d]
            steps.append(TileStep((r0, r1), (c0, c1), s, bmax, m, m_new, alpha, lsum, l_new, part))
            m, lsum = m_new, l_new
        out[r0:r1] = np.divide(acc, lsum[:, None], out=np.zeros_like(acc), where=lsum[:, None] > 0)
    ref = masked_softmax(score(slice(None), slice(None)), mask) @ v  # [T, S] @ [S, d]: the full matrix, check only
    return Tiling(T, S, d, block_q, block_k, steps, skipped, out, ref)


def head_tiling(lm, inputs, site: str, head: int, block_q: int = 16, block_k: int = 16) -> tuple[Tiling, np.ndarray]:
    """tiled_attention on one head of a real run: that site's q, k and v (after QK-norm and RoPE, the k/v head
    this query head reads) and its mask; with the model's own output of that head (hook_z, float32 [T, d_head])."""
    with torch.no_grad():
        cap = lm.forward(inputs, backend="eager", names=[f"{site}.hook_v", f"{site}.hook_z"]).capture
    rec = cap[site]
    group = rec.q.shape[1] // rec.k.shape[1]  # query heads per k/v head (GQA)
    v = cap.tensor(f"{site}.hook_v")[0, :, head // group].float().cpu().numpy()  # [B, S, Hkv, d] -> [S, d_head]
    z = cap.tensor(f"{site}.hook_z")[0, :, head].float().cpu().numpy()  # [B, T, H, d] -> [T, d_head]
    mask = rec.mask_for()  # [T, S]
    bias = None if rec.bias is None else rec.bias[head]  # [T, S]: ALiBi's or T5's positional bias
    tiling = tiled_attention(rec.q[0, head], rec.k[0, head // group], v, mask, rec.scale, block_q, block_k,
                             softcap=getattr(rec, "softcap", None), bias=bias)
    return tiling, z
