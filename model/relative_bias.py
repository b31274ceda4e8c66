"""T5's relative-position bias (Raffel et al. 2020): one learned scalar per head and distance bucket, added to
the (unscaled) scores of every self-attention layer of a stack. Distances below half the buckets get a bucket
each; longer ones share logarithmically wider buckets up to max_distance, beyond which they share the last one.
An encoder's buckets tell earlier from later keys (bidirectional); a decoder's only count how far back a key is."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def relative_buckets(rel: torch.Tensor, bidirectional: bool, n_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket ids [..] in [0, n_buckets) of relative positions rel = key − query (long)."""
    out = torch.zeros_like(rel)
    if bidirectional:
        n_buckets //= 2
        out = out + (rel > 0).long() * n_buckets  # later keys use the upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)  # how far back; a later key (masked anyway) counts as 0
    exact = n_buckets // 2
    # as T5 computes it (float log, truncation toward zero), so the buckets match checkpoints bit for bit
    large = exact + (torch.log(dist.float() / exact) / math.log(max_distance / exact) * (n_buckets - exact)).long()
    large = large.clamp(max=n_buckets - 1)
    return out + torch.where(dist < exact, dist, large)


class RelativeBias(nn.Module):
    """The bias [H, q, k] of queries at q_pos against keys at k_pos: weight[bucket(k − q), h]."""

    def __init__(self, n_buckets: int, max_distance: int, n_heads: int, bidirectional: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_buckets, n_heads) * 0.02)  # [buckets, H]
        self.n_buckets, self.max_distance, self.bidirectional = n_buckets, max_distance, bidirectional

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        rel = k_pos[None, :].long() - q_pos[:, None].long()  # [q, k]
        b = relative_buckets(rel, self.bidirectional, self.n_buckets, self.max_distance)
        return self.weight[b].permute(2, 0, 1)  # [q, k, H] -> [H, q, k]
