"""AttnCtx: the per-forward facts every attention site of one stack reads (backend, mask, positions, cache),
and what they ask once per forward (the records' mask, the SDPA kernel, whether it takes grouped k/v heads, RoPE in
q's dtype)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from attnlab.model.attention_kernels import kernel_name
from attnlab.model.cache import KVCache
from attnlab.model.record import CausalMask, HostCopy


@dataclass
class AttnCtx:
    """Per-forward facts shared by every layer of one stack (chosen once, read by each site)."""

    backend: str
    mask: torch.Tensor | None  # bool [B|1, 1, q, k] or None (all visible)
    is_causal: bool = False  # SDPA fast path: square causal, no padding, no bias
    bias: torch.Tensor | None = None  # [H, q, k] (ALiBi)
    rope: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [q, d_head]
    q_offset: int = 0
    cache: KVCache | None = None
    memory: torch.Tensor | None = None  # encoder output for cross-attention [B, S, D]
    dead_rows: bool = True  # may a query see no key (a custom or padding mask)? False: the eager softmax skips the check
    _masks: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)  # asked once per forward: kernel names, RoPE in q's dtype

    def record_mask(self, k_len: int) -> CausalMask | HostCopy | None:
        """The records' mask [B|1, q, k], deferred (nothing built or copied during the forward) and shared by
        every site of this forward."""
        if self.mask is None and not self.is_causal:
            return None
        if k_len not in self._masks:
            self._masks[k_len] = CausalMask(k_len) if self.mask is None else HostCopy(self.mask[:, 0])
        return self._masks[k_len]

    def to(self, device, non_blocking: bool = False) -> AttnCtx:
        """This context with its tensors on `device` (a block of a model spread over devices runs there; the
        records' masks and kernel names stay shared)."""
        def move(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        rope = None if self.rope is None else tuple(move(t) for t in self.rope)
        return replace(self, mask=move(self.mask), bias=move(self.bias), rope=rope, memory=move(self.memory),
                       _masks=self._masks, _memo=self._memo)

    def rope_in(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, rot] in q's and k's dtype, cast once per forward rather than at every site."""
        cos, sin = self.rope
        if cos.dtype == dtype:
            return cos, sin
        key = ("rope", cos.device, dtype)
        if key not in self._memo:
            self._memo[key] = cos.to(dtype), sin.to(dtype)
        return self._memo[key]

    def kernel(self, q, k, v, bias, scale) -> str:
        """kernel_name for these inputs, asked once per forward, device and shape (every layer alike)."""
        key = (q.device, q.shape, k.shape, q.dtype, bias is None)
        if key not in self._memo:
            self._memo[key] = kernel_name(q, k, v, self.mask, bias, scale, self.is_causal, self.backend)
        return self._memo[key]

    def grouped(self, q, k, v, bias, scale) -> bool:
        """Whether SDPA reads k, v [B, Hkv, k, d] as they are (enable_gqa, no repeated copy): its flash kernel, on
        the CPU and CUDA alike, is the one it picks for them; any other kernel gets them repeated."""
        return k.shape[1] != q.shape[1] and self.kernel(q, k, v, bias, scale).startswith("flash")
