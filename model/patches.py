"""A ViT's input: patch embedding (a strided convolution), the [CLS] token and 1-D or 2-D patch positions."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.embeddings import batched
from attnlab.model.positions import sinusoidal_table


def patch_labels(grid: int, distill: bool = False) -> list[str]:
    """Token labels of a ViT's input: "CLS" (and DeiT's "DIST"), then "r,c" (row, column) of each patch in
    row-major order."""
    return ["CLS", *(["DIST"] if distill else []), *(f"{r},{c}" for r in range(grid) for c in range(grid))]


def sinusoidal_2d(grid: int, d_model: int) -> torch.Tensor:
    """[grid², d_model]: the first half of each vector encodes the row, the second half the column (MAE's
    2-D sin-cos table, each half a 1-D sinusoidal table of width d/2)."""
    half = sinusoidal_table(grid, d_model // 2)  # [grid, D/2]
    rows = half[:, None, :].expand(grid, grid, -1)  # [r, c, D/2]
    cols = half[None, :, :].expand(grid, grid, -1)  # [r, c, D/2]
    return torch.cat([rows, cols], dim=-1).reshape(grid * grid, d_model)  # [r, c, D] -> [N, D]


class PatchEmbed(nn.Module):
    """pixels [B, C, H, W] → tokens [B, 1 + N, D]: [CLS] first (then DeiT's [DIST]), then the patches row by row,
    plus positions (then CLIP's pre-LayerNorm when cfg.embed_norm).

    positional: "learned" (one vector per token, [CLS] included: Hugging Face's ViT), "learned2d" (a row and a
    column vector summed per patch; [CLS] its own vector), "sinusoidal2d" (fixed; [CLS] none), "none"."""

    HOOKS = ("hook_embed", "hook_pos_embed")

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg, g, d = cfg, cfg.grid, cfg.d_model
        self.proj = nn.Conv2d(cfg.n_channels, d, kernel_size=cfg.patch_size, stride=cfg.patch_size,
                              bias=cfg.patch_bias)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.site = ""  # the stack's name, set by name_sites()
        if cfg.distill_token:
            self.dist = nn.Parameter(torch.zeros(1, 1, d))
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps) if cfg.embed_norm else nn.Identity()
        if cfg.positional == "learned":
            self.pos = nn.Parameter(torch.zeros(1, cfg.n_prefix + g * g, d))
        elif cfg.positional == "learned2d":
            self.pos_row = nn.Parameter(torch.zeros(g, d))
            self.pos_col = nn.Parameter(torch.zeros(g, d))
            self.pos_cls = nn.Parameter(torch.zeros(d))
        elif cfg.positional == "sinusoidal2d":
            self.register_buffer("sin_table", sinusoidal_2d(g, d), persistent=False)

    def positions(self) -> torch.Tensor | None:
        """The position vector added to each token, [1 + N, D] ([CLS] first), or None ("none")."""
        p, g = self.cfg.positional, self.cfg.grid
        if p == "learned":
            return self.pos[0]
        if p == "learned2d":
            grid = self.pos_row[:, None, :] + self.pos_col[None, :, :]  # [r, c, D]
            return torch.cat([self.pos_cls[None], grid.reshape(g * g, -1)])  # [1 + N, D]
        if p == "sinusoidal2d":
            return torch.cat([self.sin_table.new_zeros(1, self.cfg.d_model), self.sin_table])  # [1 + N, D]
        return None

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        c, s = self.cfg.n_channels, self.cfg.image_size
        if pixels.dim() != 4 or tuple(pixels.shape[1:]) != (c, s, s):
            raise ValueError(f"pixels must be [B, {c}, {s}, {s}], got {tuple(pixels.shape)}")
        x = self.proj(pixels.to(self.proj.weight.dtype))  # [B, D, g, g]
        x = x.flatten(2).transpose(1, 2)  # [B, D, g, g] -> [B, N, D]
        prefix = [self.cls] + ([self.dist] if self.cfg.distill_token else [])
        x = torch.cat([p.expand(x.shape[0], -1, -1) for p in prefix] + [x], dim=1)  # [B, n_prefix + N, D]
        pos = self.positions()
        cap = hooks.active()
        if cap is not None:
            x = cap.hook(hooks.point(self.site, "hook_embed"), x)
            name = hooks.point(self.site, "hook_pos_embed")
            pos = pos if pos is None else cap.hook(name, batched(cap, name, pos, x))  # [1 + N, D] -> [B, 1 + N, D]
        return self.norm(x if pos is None else x + pos)

    @property
    def hook_points(self) -> tuple[str, ...]:
        """hook_embed [B, n_prefix + N, D] ([CLS], DeiT's [DIST], patches); hook_pos_embed [B, n_prefix + N, D] when
        there are positions."""
        return self.HOOKS[:1] if self.cfg.positional == "none" else self.HOOKS

    def hook_names(self) -> list[str]:
        return [hooks.point(self.site, p) for p in self.hook_points]
