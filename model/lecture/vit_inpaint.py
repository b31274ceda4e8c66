"""Masked-patch inpainting, lecture-vit's auxiliary training loss: some patches of the input are painted over with
the background colour, and a linear head reads each painted patch's state after block `layer` and predicts its
original pixels (mean squared error on the normalised pixels, painted patches only). A painted patch can only be
restored from its neighbours, so the blocks up to `layer` learn to look nearby (SimMIM, Xie et al. 2022, from an
early block). The head is used in training only: the saved model is the plain ViT."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from model.images import ImagePrep


class Inpainter(nn.Module):
    """The head and the painting; `loss(model, pixels, generator)` runs `model` on a painted copy of `pixels`."""

    def __init__(self, model: nn.Module, prep: ImagePrep, background: tuple[int, int, int], layer: int, share: float):
        super().__init__()
        cfg = model.cfg
        self.p, self.g, self.share = cfg.patch_size, cfg.image_size // cfg.patch_size, share
        self.head = nn.Linear(cfg.d_model, 3 * self.p * self.p)
        canvas = np.full((cfg.image_size, cfg.image_size, 3), background, np.uint8)
        self.register_buffer("bg", prep.tensor([canvas])[0, :, 0, 0], persistent=False)  # [3] normalised
        self._h: torch.Tensor | None = None
        self._grabbing = False
        model.blocks[layer].register_forward_hook(self._grab)

    def _grab(self, module, args, out) -> None:
        if self._grabbing:
            self._h = out  # [B, 1 + N, D]

    def loss(self, model: nn.Module, pixels: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Mean squared error of the painted patches' predicted pixels; `pixels` [B, 3, H, W] normalised."""
        B, p, g = pixels.shape[0], self.p, self.g
        painted = torch.rand(B, g, g, generator=gen) < self.share  # [B, g, g]
        patches = pixels.unflatten(2, (g, p)).unflatten(4, (g, p))  # [B, 3, H, W] -> [B, 3, g, p, g, p]
        fill = self.bg.view(1, 3, 1, 1, 1, 1)
        x = torch.where(painted[:, None, :, None, :, None], fill, patches).flatten(4, 5).flatten(2, 3)  # [B, 3, H, W]
        self._grabbing = True
        try:
            model(x, backend="sdpa")
        finally:
            self._grabbing = False
        h, self._h = self._h[:, 1:], None  # [B, N, D] patch states after block `layer`
        target = patches.permute(0, 2, 4, 1, 3, 5).flatten(3).flatten(1, 2)  # [B, g, g, 3, p, p] -> [B, N, 3·p·p]
        sel = painted.flatten(1)  # [B, N]
        if not sel.any():
            return h.sum() * 0.0
        return F.mse_loss(self.head(h)[sel], target[sel])
