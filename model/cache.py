"""KV cache: per-site keys and values, appended step by step; cross-attention K/V computed once."""

from __future__ import annotations

import torch


class KVCache:
    """Keys/values [B, Hkv, T, d] per self-attention site (the k/v heads only: n_kv_heads under
    grouped-query attention, never repeated per query head), and the fixed cross-attention K/V."""

    def __init__(self) -> None:
        self.self_kv: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.cross: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.length = 0  # positions already cached (the next query's absolute offset)

    def append(self, site: str, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's k, v for `site`; return every key and value so far."""
        if site in self.self_kv:
            k0, v0 = self.self_kv[site]
            k, v = torch.cat([k0, k], dim=2), torch.cat([v0, v], dim=2)  # along positions
        self.self_kv[site] = (k, v)
        return k, v

    def advance(self, n: int) -> None:
        self.length += n

    def __len__(self) -> int:
        return self.length
