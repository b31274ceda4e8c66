"""The norm layers of a model: LayerNorm or RMSNorm, chosen by the config, with TransformerLens's two hook points.

A norm divides its input by a scale and then applies its weight (and bias): LayerNorm(x) = (x − mean x)/scale·w + b
with scale = √(mean((x − mean x)²) + ε); RMSNorm(x) = x/scale·w with scale = √(mean(x²) + ε). As TransformerLens's
LayerNorm and RMSNorm, `{site}.hook_scale` [..., 1] holds the scale and `{site}.hook_normalized` [..., D] the
normalised input x̂ = x_centred/scale, BEFORE the weight and bias; the norm's output is `affine(x̂)`. Both are
float32 for a 16-bit model, as in TransformerLens.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.config import ModelConfig


class NormHooks:
    """hook_scale and hook_normalized for an nn.LayerNorm or nn.RMSNorm (mixed in: the plain forward is theirs)."""

    HOOKS = ("hook_scale", "hook_normalized")  # [..., 1] the divisor; [..., D] the input over it, before w (and b)
    centres = False  # LayerNorm subtracts the mean first

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The divisor [..., 1] of x [..., D] (16-bit x in float32): with it frozen the norm is linear in x."""
        return _scale(self._centred(x), self._eps(x))

    def affine(self, normalized: torch.Tensor) -> torch.Tensor:
        """The norm's output from hook_normalized's value: x̂·w (+ b)."""
        w, b = self.weight, getattr(self, "bias", None)
        out = normalized if w is None else normalized * w
        return out if b is None else out + b

    def forward_hooked(self, x: torch.Tensor, cap, site: str) -> torch.Tensor:
        """forward inside a capture `cap`, with `site`.hook_scale and `site`.hook_normalized. Kept only, they are
        computed beside the plain forward (its output unchanged, bit for bit); intervened on (or kept with
        gradients), the output is affine(hook_normalized(x_centred / hook_scale(scale))), as in TransformerLens."""
        names = (f"{site}.hook_scale", f"{site}.hook_normalized")
        if not cap.wants_any(names):
            return self(x)
        out = None if cap.changes_any(names) else self(x)
        xc = self._centred(x)
        s = cap.hook(f"{site}.hook_scale", _scale(xc, self._eps(x)))
        normalized = cap.hook(f"{site}.hook_normalized", xc / s)
        return out if out is not None else self.affine(normalized).to(x.dtype)

    def _centred(self, x: torch.Tensor) -> torch.Tensor:
        x = x if x.dtype in (torch.float32, torch.float64) else x.float()
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def _eps(self, x: torch.Tensor) -> float:
        return self.eps if self.eps is not None else torch.finfo(x.dtype).eps  # nn.RMSNorm's default


def _scale(xc: torch.Tensor, eps: float) -> torch.Tensor:
    return (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # [..., D] -> [..., 1]


class LayerNorm(NormHooks, nn.LayerNorm):
    centres = True


class RMSNorm(NormHooks, nn.RMSNorm):
    pass


def make_norm(cfg: ModelConfig, dim: int | None = None) -> nn.Module:
    dim = dim or cfg.d_model
    if cfg.norm_type == "rmsnorm":
        return RMSNorm(dim, eps=cfg.norm_eps)
    return LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.bias)


def has_hooks(norm: nn.Module) -> bool:
    """True for a norm with a scale (an Identity, where a block has no norm, has none and fires no hook)."""
    return isinstance(norm, NormHooks)


def norm_hook_names(norm: nn.Module, site: str) -> list[str]:
    """`site`.hook_scale and `site`.hook_normalized for a norm with a scale; [] for an Identity."""
    return [f"{site}.{p}" for p in norm.HOOKS] if has_hooks(norm) else []


def run_norm(norm: nn.Module, x: torch.Tensor, site: str) -> torch.Tensor:
    """norm(x), firing `site`.hook_scale and .hook_normalized when a capture keeps or changes them (BERT's
    embed.ln); the plain call otherwise."""
    cap = hooks.active()
    if cap is None or cap.records_only or not has_hooks(norm):
        return norm(x)
    return norm.forward_hooked(x, cap, site)


def run_head_norm(norm: nn.Module, x: torch.Tensor, site: str, name: str) -> torch.Tensor:
    """A per-head q or k norm (Qwen3, Gemma 3: TransformerLens's attn.q_norm / attn.k_norm, `name` under the
    attention `site`) of x [B, n, T, d], its hooks in hook_q's layout: hook_scale [B, T, n, 1], hook_normalized
    [B, T, n, d]."""
    cap = hooks.active()
    if cap is None or cap.records_only or not has_hooks(norm):
        return norm(x)
    return norm.forward_hooked(x.transpose(1, 2), cap, f"{site}.{name}").transpose(1, 2)  # [B, n, T, d] <-> [B, T, n, d]
