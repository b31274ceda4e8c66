"""lecture-vit's training-only extras (the saved model is the plain ViT):

- `sincos_init`: the learned position embeddings start from the 2-D sine–cosine table (MAE's fixed one) and are
  then trained like any weight.
- `Locality`: a penalty on block 0's attention, the mean mass a patch puts on patches outside its 3×3
  neighbourhood (patches only, renormalised as `analysis.probes.patch_maps.mean_attention_distance` does): a prior that the
  first block looks nearby, as CNN-like early layers do (ConViT, d'Ascoli et al. 2021, starts its heads local).
- `Inpainter`: masked-patch inpainting: some patches of the input are painted over with the background colour, and
  a linear head reads each painted patch's state after block `layer` and predicts its original pixels (mean
  squared error on the normalised pixels, painted patches only; SimMIM, Xie et al. 2022, from an early block)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from attnlab.model.images import ImagePrep
from attnlab.model.patches import sinusoidal_2d


def sincos_init(model: nn.Module, scale: float = 1.0) -> None:
    """Set the patch rows of the learned position table to `scale` × the 2-D sine–cosine table ([CLS]'s stays)."""
    cfg = model.cfg
    with torch.no_grad():
        model.embed.pos[0, cfg.n_prefix:] = scale * sinusoidal_2d(cfg.image_size // cfg.patch_size, cfg.d_model)


class Locality:
    """`penalty()`: block 0's mean attention mass outside each patch's 3×3 neighbourhood in the last forward."""

    def __init__(self, model: nn.Module, prefix: int = 1):
        g = model.cfg.image_size // model.cfg.patch_size
        r, c = np.divmod(np.arange(g * g), g)  # [N] each
        self.far = torch.from_numpy(np.maximum(abs(r[:, None] - r[None]), abs(c[:, None] - c[None])) > 1)  # [N, N]
        self.attn, self.prefix, self._x = model.blocks[0].attn, prefix, None
        self.attn.register_forward_pre_hook(self._grab)

    def _grab(self, module, args) -> None:
        self._x = args[0] if torch.is_grad_enabled() else None  # [B, T, D] block 0's normed input

    def penalty(self) -> torch.Tensor:
        at, p = self.attn, self.prefix
        q, k, _ = at.project_qkv(self._x)  # [B, T, h·d] each
        q, k = at._heads(q)[:, :, p:], at._heads(k)[:, :, p:]  # [B, T, h·d] -> [B, h, N, d] patches only
        w = torch.softmax(q @ k.transpose(-1, -2) * at.scale, -1)  # [B, h, N, N]
        return (w * self.far).sum(-1).mean()


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
