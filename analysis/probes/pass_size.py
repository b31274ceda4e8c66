"""How big one gradient pass may be: rows of one input per forward (and backward) within PASS_BYTES, and the
longest input integrated gradients takes, from the model's shape alone.

Per batch row of T tokens, in the model's float size (S attention sites of H heads, L blocks, vocabulary V):
  with a backward   2·T·V (the logits and their gradient) + 3·S·H·T² (scores, pattern, its gradient, kept for
                    every site) + L·T·(12·d_model + 4·d_mlp) (the activations autograd keeps)
  forward only      2·T·V + 3·H·T² + 4·T·max(d_model, d_mlp) (one block's work alive at a time)
Integrated gradients runs up to `passes` such rows (attributions.ig_passes: its scan's forwards, then 64 to 512
nodes with a backward), so it takes an input only while their work, passes · row_flops, stays within IG_MAX_FLOPS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

PASS_BYTES = 1 << 29  # the most one batched pass of attribution rows should hold (512 MiB)
IG_MAX_FLOPS = 2e12  # about a minute of one busy CPU core (≈ 30 GFLOP/s); integrated gradients takes no more


def _shape(lm) -> tuple[int, int, int, int, int, int]:
    """(attention sites, heads, blocks, d_model, d_mlp, vocabulary) of a loaded model."""
    c = lm.cfg
    vocab = c.n_classes if lm.reads_image else c.vocab_size
    return lm.n_sites, c.n_heads, lm.n_blocks, c.d_model, c.hidden, vocab  # sites: an encoder–decoder's cross too


def row_bytes(lm, t: int, grad: bool) -> int:
    """Estimated bytes one batch row of `t` tokens holds at its peak (module docstring)."""
    sites, h, blocks, d, d_mlp, v = _shape(lm)
    if grad:
        cells = 2 * t * v + 3 * sites * h * t * t + blocks * t * (12 * d + 4 * d_mlp)
    else:
        cells = 2 * t * v + 3 * h * t * t + 4 * t * max(d, d_mlp)
    return cells * next(lm.model.parameters()).element_size()


def rows_per_pass(lm, t: int, grad: bool) -> int:
    """How many rows of `t` tokens one pass takes within PASS_BYTES (at least 1)."""
    return max(1, PASS_BYTES // row_bytes(lm, t, grad))


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def give_back() -> None:
    """Hand freed heap memory back to the system between passes (glibc's malloc_trim; a no-op elsewhere).

    Without it glibc keeps a freed pass's blocks (its mmap threshold rises to the largest freed block), and
    the next passes' tensors land beside them: the process grew by 550 MB over 227 one-row passes of 37 MB."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def row_flops(lm, t: int) -> float:
    """Multiply-adds ×2 of one forward over `t` tokens: the weights once per token, attention T² per head."""
    c = lm.cfg
    sites, _, blocks, d, d_mlp, v = _shape(lm)
    kv = c.kv_heads * c.d_head
    per_token = blocks * (2 * d * c.d_attn + 2 * d * kv + 3 * d * d_mlp) + d * v
    return 2.0 * t * per_token + 4.0 * sites * c.d_attn * t * t


def max_tokens(lm, passes: int) -> int:
    """The longest input (tokens, at most the model's context) whose `passes` rows stay within IG_MAX_FLOPS;
    0 when not even one token does."""
    lo, hi = 0, lm.context  # passes · row_flops(lo) fits (or lo = 0); the answer is in lo..hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if passes * row_flops(lm, mid) <= IG_MAX_FLOPS else (lo, mid - 1)
    return lo
