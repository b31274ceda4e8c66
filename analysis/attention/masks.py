"""Ways to apply a mask, side by side: zero after the softmax, zero and re-normalise, −inf before it.
The masks themselves are built in one place, model.masks (bool [q, k], True = may attend)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from attnlab.model.softmax import masked_softmax


class MaskVariants(NamedTuple):
    zero_after: np.ndarray  # softmax(s) with masked entries then set to 0; rows sum to < 1
    zero_renorm: np.ndarray  # zero_after with rows re-normalised
    neg_inf: np.ndarray  # softmax(s with −inf where masked)


def zero_after_softmax_vs_neg_inf(scores, mask) -> MaskVariants:
    """Three ways to mask: zero after softmax, zero and re-normalise, −inf before softmax.

    zero_renorm = e^{s_j}·m_j / Σ_j' e^{s_j'}·m_j' equals neg_inf exactly (up to rounding);
    zero_after leaks the masked keys into the denominator, so its rows sum to less than 1.
    Fully masked rows are zeros in all three.
    """
    s = np.asarray(scores, dtype=np.float64)
    m = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    zero_after = masked_softmax(s) * m
    total = zero_after.sum(-1, keepdims=True)
    zero_renorm = np.divide(zero_after, total, out=np.zeros_like(zero_after), where=total > 0)
    return MaskVariants(zero_after, zero_renorm, masked_softmax(s, m))
