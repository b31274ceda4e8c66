"""Held-out accuracy of an image classifier (lecture-vit) on fresh eval-split shape images."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.model.images import ImagePrep
from attnlab.model.lecture.shapes import CLASSES, shape_images

BATCH = 200


@torch.no_grad()
def predict(model: torch.nn.Module, prep: ImagePrep, images: list[np.ndarray]) -> np.ndarray:
    """Predicted class per image: int [n]."""
    was = model.training
    model.eval()
    out = [model(prep.tensor(images[i:i + BATCH]), backend="sdpa").logits.argmax(-1)  # [b]
           for i in range(0, len(images), BATCH)]
    model.train(was)
    return torch.cat(out).cpu().numpy()


def evaluate_images(lm, n: int = 200, seed: int = 0) -> dict:
    """{"accuracy", "n", "seed", "per_class": {name: {"n", "accuracy"}}, "tasks": {"red-vs-blue": {...}}} on `n`
    fresh eval-split images."""
    if not lm.reads_image or lm.class_names != list(CLASSES):
        raise ValueError(f"{lm.name} is not a red-vs-blue classifier (its classes are not {', '.join(CLASSES)})")
    ims = shape_images(n, seed, "eval")
    labels = np.array([im.label for im in ims])
    pred = predict(lm.model, lm.image, [im.image for im in ims])
    right = pred == labels
    per = {c: {"n": int((labels == i).sum()), "accuracy": float(right[labels == i].mean()) if (labels == i).any() else None}
           for i, c in enumerate(CLASSES)}
    overall = {"n": n, "accuracy": float(right.mean())}
    return {"model": lm.name, "seed": seed, **overall, "per_class": per, "tasks": {"red-vs-blue": overall}}
