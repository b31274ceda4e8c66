"""The attention maths of every backend, one call each: eager (softmax(scale·q·kᵀ + bias) · v with its hook points),
fused (F.scaled_dot_product_attention; flash pinned, on CUDA with the next kernels as fallback), which kernel ran,
and the k/v heads repeated per query group (grouped-query attention)."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from attnlab.model.softmax import masked_softmax_torch
from torch.nn.attention import SDPBackend, sdpa_kernel

_KERNELS = {0: "math", 1: "flash", 2: "mem_efficient", 3: "cudnn", 4: "overrideable"}


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """Repeat each k/v head for the `group` query heads that share it: [B, Hkv, T, d] -> [B, Hkv·group, T, d]."""
    if group == 1:
        return x
    B, Hkv, T, d = x.shape
    return x[:, :, None].expand(B, Hkv, group, T, d).reshape(B, Hkv * group, T, d)  # [B, Hkv, g, T, d] -> [B, H, T, d]


def scaled_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """scale·q·kᵀ [B, H, q, k] from q [B, H, q, d] and k [B, H, k, d], the scale applied inside the product (one pass
    over the T² scores, not two)."""
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    qf, kf = q.reshape(B * H, Tq, d), k.reshape(B * H, Tk, d)  # [B, H, T, d] -> [B·H, T, d]
    out = torch.baddbmm(q.new_empty(B * H, Tq, Tk), qf, kf.transpose(1, 2), beta=0.0, alpha=scale)  # input ignored
    return out.view(B, H, Tq, Tk)  # [B·H, q, k] -> [B, H, q, k]


def explicit_mask(mask, is_causal: bool, q, k):
    """`mask`, or the explicit causal mask [1, 1, q, k] that a fused fast path left out (is_causal)."""
    if mask is None and is_causal:
        return torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()[None, None]
    return mask


def eager_attention(q, k, v, mask, bias, scale, site, cap, softcap, dead_rows: bool | None):
    """Plain math with hook points on scores, mask and pattern. Returns z [B, H, q, d], scores, pattern;
    the scores come back unmasked only when a hook keeps them or an intervention changed them (else they
    were masked in place). `softcap` (Gemma 2): scaled scores → softcap·tanh(scores/softcap) before the bias.
    `dead_rows`: may a row see no key (masked_softmax_torch; None: look, one device sync)."""
    scores = scaled_scores(q, k, scale)  # [B, H, q, k]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    kept = False  # does anything hold on to `scores` after this call (a hook tensor, an intervention)?
    if cap is not None:
        name = f"{site}.hook_attn_scores"
        kept = name in cap.interventions or cap.wants_tensor(name)
        scores = cap.hook(name, scores)
        if mask is None:
            mask = torch.ones(1, 1, *scores.shape[-2:], dtype=torch.bool, device=scores.device)
        if f"{site}.hook_mask" in cap.interventions:
            dead_rows = True  # an intervened mask may hide every key of a row
        mask = cap.hook(f"{site}.hook_mask", mask)
    # −inf before the softmax gives exact zeros at masked keys. Nobody keeps the scores: mask them in place
    # (one T² buffer fewer); the returned scores are then masked.
    pattern = masked_softmax_torch(scores, mask, in_place=not kept, dead_rows=dead_rows)
    if cap is not None:
        pattern = cap.hook(f"{site}.hook_pattern", pattern)
    return torch.matmul(pattern, v), scores, pattern


def flash_kernels(q) -> list:
    """The kernels backend='flash' may run: flash alone on the CPU; on CUDA, whose flash kernel takes no explicit
    mask, no float32 and not every head size, the next fused kernel and then the math one, in that order (the
    record's kernel names the one that ran, `kernel_name`)."""
    return [SDPBackend.FLASH_ATTENTION] + ([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH] if q.is_cuda else [])


def _pinned(q, backend: str):
    """The kernels `backend` may run, as a context: flash_kernels for 'flash', PyTorch's own choice for 'sdpa'."""
    return sdpa_kernel(flash_kernels(q)) if backend == "flash" else contextlib.nullcontext()


def fused_attention(q, k, v, mask, bias, scale, is_causal, backend, dead_rows: bool = True):
    """F.scaled_dot_product_attention; flash pinned for backend='flash'. q [B, H, q, d]; k, v [B, H, k, d], or
    [B, Hkv, k, d] read grouped (enable_gqa) where kernel_name says flash runs on them (AttnCtx.grouped). Returns z [B, H, q, d]; `dead_rows`
    False skips zeroing rows that see no key (the mask shows every query a key)."""
    attn_mask = mask
    if bias is not None:
        b = bias[None].to(q.dtype)  # [1, H, q, k]
        attn_mask = b if mask is None else b.masked_fill(~mask, float("-inf"))
    with _pinned(q, backend):
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                           enable_gqa=k.shape[1] != q.shape[1])
    if mask is not None and dead_rows:
        z = z.masked_fill(~mask.any(-1, keepdim=True), 0.0)  # a fully masked row outputs 0, never NaN
    return z


def kernel_name(q, k, v, mask, bias, scale, is_causal, backend) -> str:
    """Which SDPA kernel PyTorch picks for these inputs (what actually runs)."""
    if backend == "eager":
        return "eager"
    device = "cuda" if q.is_cuda else "cpu"
    attn_mask = mask if bias is None else bias[None].to(q.dtype)
    try:
        if backend == "flash" and device == "cpu":
            choice = 1  # pinned: the CPU has the one fused kernel
        else:
            with _pinned(q, backend):
                choice = torch._fused_sdp_choice(q, k, v, attn_mask, 0.0, is_causal, scale=scale,
                                                 enable_gqa=k.shape[1] != q.shape[1])
        name = _KERNELS.get(int(choice), str(choice))
    except Exception:  # noqa: BLE001 — a private API; report honestly when it is unavailable
        name = "unknown"
    fused = " (PyTorch fused CPU kernel)" if device == "cpu" and name == "flash" else ""
    return f"{name}{fused} [{device}]"
