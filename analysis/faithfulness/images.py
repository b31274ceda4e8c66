"""Faithfulness for images: do a ViT's attention maps point at the objects that decide the label?

Images come from model.lecture.shapes (eval split): the label is where the red object lies relative to the blue
one, and the pixel mask of those two objects is known. Each method gives a map over the patch grid for the [CLS]
token (analysis/probes/patch_maps.py):
  last_layer    mean_h A_L[CLS]                           (the last layer's attention from [CLS])
  head_mean     mean_{l,h} A_l[CLS]
  rollout       rollout_map(run, "mean", discard=0)
  attention_norm, value_zeroing   analysis.probes.context_mixing: the last layer's [CLS] row over the patches
  grad_rollout  grad_rollout_map for the correct class
  relevance     relevance_map (Chefer et al. 2021) for the correct class
  input_x_gradient, integrated_gradients, attention_x_gradient   analysis.probes.attributions for the correct class's
                logit, each patch's score (signed; the mass counts the positive part). "integrated_gradients" in
                the report: its baseline (zero patch embeddings), and per image its steps and completeness error.
The region is the share of each patch inside the mask. Per method: `pointing` = share of images whose top patch
touches the region (the pointing game), `mass` = mean share of the map's mass inside the region. Chance: a
uniformly random patch touches the region with probability `chance.pointing`; a uniform map puts `chance.mass`
(the region's area share) inside it. `heads`: each layer.head's mean [CLS] mass inside the region, largest first.
"""

from __future__ import annotations

import numpy as np
from attnlab.analysis.faithfulness.benchmark import ig_report
from attnlab.analysis.probes.attributions import attention_x_gradient, input_x_gradient, integrated_gradients
from attnlab.analysis.probes.context_mixing import METHODS as CONTEXT_MIXING
from attnlab.analysis.probes.context_mixing import context_mixing
from attnlab.analysis.probes.patch_maps import (
    grad_rollout_map,
    patch_map_cls,
    patch_region,
    patch_scores,
    pointing_hit,
    region_share,
    relevance_map,
    rollout_map,
)
from attnlab.model.inputs import InputError
from attnlab.model.lecture.shapes import CLASSES, shape_images

METHODS = ("last_layer", "head_mean", "rollout", "attention_norm", "value_zeroing", "grad_rollout", "relevance",
           "input_x_gradient", "integrated_gradients", "attention_x_gradient")
MAX_IMAGES = 2000


def image_faithfulness(lm, n: int = 100, seed: int = 0) -> dict:
    """The report described in the module docstring, over `n` eval-split shape images."""
    if not lm.reads_image or lm.class_names != list(CLASSES):
        raise InputError(f"{lm.name} is not a red-vs-blue classifier (classes {', '.join(CLASSES)}); image faithfulness "
                         "needs lecture-vit or a model trained on model.lecture.shapes")
    if not 1 <= n <= MAX_IMAGES:
        raise InputError(f"--n must be between 1 and {MAX_IMAGES}, got {n}")
    grid = lm.patch_grid
    hits = {m: [] for m in METHODS}
    mass = {m: [] for m in METHODS}
    heads, right, area, touch, igs = [], [], [], [], []
    for ex in shape_images(n, seed, "eval"):
        inp = lm.encode_image(ex.image)
        run = lm.capture(inp)
        region = patch_region(ex.mask, grid)
        a = run.matrices("self")[:, :, 0, 1:].astype(np.float64)  # [L, H, N]: [CLS] → patches
        maps = {"last_layer": patch_map_cls(run, len(a) - 1, None), "head_mean": a.mean((0, 1)).reshape(grid),
                "rollout": rollout_map(run), "grad_rollout": grad_rollout_map(lm, inp, ex.label),
                "relevance": relevance_map(lm, inp, ex.label)}
        igs.append(integrated_gradients(lm, inp, 0, ex.label))
        for m in CONTEXT_MIXING:
            maps[m] = patch_scores(context_mixing(lm, inp, m)[-1, 0])  # [CLS]'s row of the last layer
        maps["input_x_gradient"] = patch_scores(input_x_gradient(lm, inp, 0, ex.label).row)
        maps["integrated_gradients"] = patch_scores(igs[-1].row)
        maps["attention_x_gradient"] = patch_scores(attention_x_gradient(lm, inp, 0, ex.label).row)
        for m, map_ in maps.items():
            hits[m].append(pointing_hit(map_, region))
            mass[m].append(region_share(map_, region))
        heads.append([[region_share(h.reshape(grid), region) for h in layer] for layer in a])  # [L, H]
        right.append(int(run.top_ids[0][0]) == ex.label)  # the top class
        area.append(region.mean())
        touch.append((region > 0).mean())
    per_head = np.mean(heads, axis=0)  # [L, H]
    ranked = sorted(((float(per_head[i, j]), i, j) for i in range(per_head.shape[0]) for j in range(per_head.shape[1])),
                    reverse=True)
    return {"model": lm.name, "arch": lm.arch, "n_examples": n, "seed": seed, "accuracy": float(np.mean(right)),
            "chance": {"pointing": float(np.mean(touch)), "mass": float(np.mean(area))},
            "methods": {m: {"pointing": float(np.mean(hits[m])), "mass": float(np.mean(mass[m])), "n": n}
                        for m in METHODS},
            "heads": [{"layer": i, "head": j, "mass": v} for v, i, j in ranked],
            "integrated_gradients": ig_report(igs)}
