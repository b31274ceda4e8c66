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
