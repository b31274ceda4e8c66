"""The norm layers of a model: LayerNorm or RMSNorm, chosen by the config."""

from __future__ import annotations

import torch.nn as nn
from attnlab.model.config import ModelConfig


def make_norm(cfg: ModelConfig, dim: int | None = None) -> nn.Module:
    dim = dim or cfg.d_model
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(dim, eps=cfg.norm_eps)
    return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.bias)
