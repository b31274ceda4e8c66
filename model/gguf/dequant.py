"""GGUF tensors → float32 numpy arrays (gguf.quants does the block maths), and llama.cpp's q/k row order undone.

llama.cpp's converter reorders the rows of a Llama q and k projection within each head, from rotate-half
RoPE's [first half | second half] to interleaved pairs (its own RoPE rotates adjacent pairs); `unpermute`
is the inverse, so our rotate-half RoPE sees the rows transformers' checkpoints have.
"""

from __future__ import annotations

import numpy as np
from attnlab.model.gguf.reader import GGUFError, GGUFFile, TensorInfo
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q

SUPPORTED = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K,
             Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS)  # llama.cpp's standard mixes and their stand-ins where a row is not
# 256 wide (Q4_K → Q5_0, Q5_K → Q5_1, Q2_K/Q3_K/IQ4_XS → IQ4_NL)


def check_types(g: GGUFFile) -> None:
    """Refuse (one line) a file holding a tensor type we do not dequantise, before any tensor is read."""
    for t in g.tensors.values():
        if t.qtype not in SUPPORTED:
            raise GGUFError(f"{g.path.name}: tensor {t.name!r} is {t.qtype.name}, which attnlab does not "
                            f"dequantise (supported: {', '.join(q.name for q in SUPPORTED)})")


def dequantize(g: GGUFFile, info: TensorInfo) -> np.ndarray:
    """One tensor as float32 in numpy order (GGUF dims reversed): [rows …, ne0]."""
    if info.qtype not in SUPPORTED:
        raise GGUFError(f"{g.path.name}: tensor {info.name!r} is {info.qtype.name}, not a supported type")
    raw = g.raw(info)  # uint8 [rows …, row bytes]
    out = quants.dequantize(raw, info.qtype)
    out = np.asarray(out, dtype=np.float32).reshape(info.shape)  # [rows …, ne0]
    if not np.isfinite(out).all():
        raise GGUFError(f"{g.path.name}: tensor {info.name!r} holds NaN or infinite values")
    return out


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's reordering of q/k rows (convert_hf_to_gguf's `permute`): per head, [half0 | half1] → pairs."""
    rows = w.shape[0]
    # [H, 2, d/2, …] → [H, d/2, 2, …]: row (half j, index i) moves to row 2i + j
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of `permute`: interleaved pairs back to rotate-half's [half0 | half1] per head."""
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise GGUFError(f"q/k projection with {rows} rows does not split into {n_heads} heads of even size")
    # [H, d/2, 2, …] → [H, 2, d/2, …]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
