"""Attention masks as bool tensors [.., q, k], True = may attend.

Queries sit at absolute positions offset..offset+q−1 and keys at 0..k−1, so a cached or chunked
step is aligned bottom-right (SDPA's `is_causal` aligns top-left and is only used when q = k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

KINDS = ("causal", "bidirectional", "sliding_window", "prefix_lm", "custom")


@dataclass(frozen=True)
class MaskSpec:
    """Which pairs (query, key) may attend. `custom` is a bool [T, T] over absolute positions."""

    kind: str = "causal"
    window: int | None = None  # sliding_window: a query sees itself and window−1 earlier keys
    sinks: int = 0  # sliding_window: and keys 0..sinks−1 too (StreamingLLM's attention sinks)
    prefix: int | None = None  # prefix_lm: keys < prefix are visible to every query
    custom: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"mask kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "sliding_window" and (self.window is None or self.window < 1):
            raise ValueError("a sliding_window mask needs window ≥ 1")
        if self.sinks < 0 or (self.sinks and self.kind != "sliding_window"):
            raise ValueError("sinks (keys every query sees) need a sliding_window mask and sinks ≥ 0")
        if self.kind == "prefix_lm" and (self.prefix is None or self.prefix < 0):
            raise ValueError("a prefix_lm mask needs prefix ≥ 0")
        if self.kind == "custom":
            if self.custom is None or self.custom.dtype != torch.bool or self.custom.dim() != 2:
                raise ValueError("a custom mask needs a bool tensor [T, T]")

    @property
    def causal_like(self) -> bool:
        """True when no query sees a later key (a KV cache is valid)."""
        return self.kind in ("causal", "sliding_window")


CAUSAL = MaskSpec("causal")
BIDIRECTIONAL = MaskSpec("bidirectional")


def as_spec(mask: str | MaskSpec | torch.Tensor | None, default: MaskSpec) -> MaskSpec:
    """Accept a kind name, a MaskSpec, a bool [T, T] tensor (custom) or None (the default)."""
    if mask is None:
        return default
    if isinstance(mask, MaskSpec):
        return mask
    if isinstance(mask, torch.Tensor):
        return MaskSpec("custom", custom=mask)
    return MaskSpec(mask)


def pair_mask(spec: MaskSpec, q_len: int, k_len: int, q_offset: int = 0, device=None) -> torch.Tensor | None:
    """Bool [q, k] for the spec, or None when every pair may attend."""
    if spec.kind == "bidirectional" or _all_visible(spec, q_len, k_len, q_offset):
        return None
    if spec.kind == "custom":
        c = spec.custom
        need = max(q_offset + q_len, k_len)
        if c.shape[0] < q_offset + q_len or c.shape[1] < k_len:
            raise ValueError(f"custom mask is {tuple(c.shape)}, needs at least {need}×{need}")
        return c[q_offset : q_offset + q_len, :k_len].to(device)
    qp = torch.arange(q_offset, q_offset + q_len, device=device)[:, None]  # [q, 1]
    kp = torch.arange(k_len, device=device)[None, :]  # [1, k]
    if spec.kind == "causal":
        return kp <= qp
    if spec.kind == "sliding_window":
        return (kp <= qp) & ((qp - kp < spec.window) | (kp < spec.sinks))  # the first `sinks` keys stay
    return (kp <= qp) | (kp < spec.prefix)  # prefix_lm


def _all_visible(spec: MaskSpec, q_len: int, k_len: int, q_offset: int) -> bool:
    """True when the spec hides no pair, decided on the host (no device sync): the first query already sees
    every key (and, with a window, the last query still sees key 0); a custom mask is read where it lives."""
    sees_all = q_offset >= k_len - 1
    if spec.kind == "causal":
        return sees_all
    if spec.kind == "sliding_window":
        return sees_all and q_offset + q_len - 1 < spec.window
    if spec.kind == "prefix_lm":
        return sees_all or k_len <= spec.prefix
    c = spec.custom  # the user's own tensor (on the host as given); a too-small one is refused by the caller
    return c.shape[0] >= q_offset + q_len and c.shape[1] >= k_len and bool(c[q_offset : q_offset + q_len, :k_len].all())


def build_mask(
    spec: MaskSpec,
    q_len: int,
    k_len: int,
    q_offset: int = 0,
    key_padding: torch.Tensor | None = None,
    device=None,
) -> torch.Tensor | None:
    """Bool [B|1, 1, q, k] combining the pair mask with a per-KEY padding mask [B, k], or None."""
    m = pair_mask(spec, q_len, k_len, q_offset, device)
    m = None if m is None else m[None, None]  # [1, 1, q, k]
    if key_padding is not None:  # used as given (Inputs.to drops an all-real one on the host): no device sync
        kpm = key_padding.to(device=device, dtype=torch.bool)[:, None, None, :]  # [B, 1, 1, k]
        m = kpm.expand(-1, 1, q_len, -1) if m is None else (m & kpm)
    return m


def mask_array(spec: MaskSpec, T: int, real_keys: int | None = None) -> np.ndarray:
    """bool [T, T] as numpy, True = may attend; keys from `real_keys` on are padding (hidden from every query)."""
    m = pair_mask(spec, T, T)
    out = np.ones((T, T), dtype=bool) if m is None else m.cpu().numpy()
    if real_keys is not None:
        out &= np.arange(T)[None, :] < real_keys  # [1, T]: per key, never per pair
    return out
