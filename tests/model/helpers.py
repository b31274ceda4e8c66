"""Tiny seeded models for model tests."""

from __future__ import annotations

import torch
from attnlab.model.config import ModelConfig
from attnlab.model.transformer import build_model


def tiny(arch: str = "decoder", seed: int = 0, **kw):
    cfg = ModelConfig(**{**dict(arch=arch, vocab_size=50, d_model=32, n_heads=4, n_layers=2, max_len=64), **kw})
    torch.manual_seed(seed)
    return build_model(cfg).eval()


def tokens(T: int = 10, B: int = 1, seed: int = 1, vocab: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B, T), generator=g)


def tl_norm(x: torch.Tensor, eps: float, centre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """TransformerLens's LayerNorm (centre) / RMSNorm in plain torch: (scale [..., 1], normalized [..., D])."""
    x = x - x.mean(-1, keepdim=True) if centre else x
    scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return scale, x / scale


def norm_inputs(hf, norms: dict, ids: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """What each of transformers' norm modules `norms` {our site: module} read in one run of `hf` on ids, and the
    logits."""
    seen = {}
    handles = [m.register_forward_pre_hook(lambda _m, a, s=site: seen.__setitem__(s, a[0].detach()))
               for site, m in norms.items()]
    try:
        with torch.no_grad():
            logits = hf(ids).logits
    finally:
        for h in handles:
            h.remove()
    return seen, logits


def halved_norm_logits(hf, mod, ids: torch.Tensor) -> torch.Tensor:
    """transformers' logits with the norm module `mod`'s output halved (its bias, if any, kept)."""
    b = mod.bias.detach() if getattr(mod, "bias", None) is not None else 0.0
    handle = mod.register_forward_hook(lambda _m, _a, out: b + (out - b) / 2)
    try:
        with torch.no_grad():
            return hf(ids).logits
    finally:
        handle.remove()
