"""A ViT over one image, as the Vision page shows it: the image as the model reads it, the captured run, the
prediction, every kind of map over the patch grid, and how much of each map lies in a known region."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.attributions import attribute
from attnlab.analysis.probes.context_mixing import context_mixing
from attnlab.model.captured import CapturedRun
from attnlab.model.images import RESAMPLE
from attnlab.model.inputs import InputError
from attnlab.model.patches import sinusoidal_2d
from PIL import Image

MAP_KINDS = ("attention", "rollout", "attention norm", "value zeroing", "gradient rollout", "relevance",
             "input × gradient", "integrated gradients", "attention × gradient")  # no class needed: the first four
MIXING = {"attention norm": "attention_norm", "value zeroing": "value_zeroing"}  # analysis.probes.context_mixing
ATTRIBUTIONS = {"input × gradient": "input_x_gradient", "integrated gradients": "integrated_gradients",
                "attention × gradient": "attention_x_gradient"}  # map kind -> analysis.probes.attributions method
FUSIONS = ("mean", "max", "min")


def model_view(lm, image: np.ndarray) -> np.ndarray:
    """The image at the model's input size, resized as its preprocessing resizes it: uint8 [h, w, 3]. What the
    page draws, so the patch grid sits on the pixels the model read."""
    h, w = lm.image_size
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise InputError(f"an image must be uint8 [H, W, 3], got {image.dtype} {image.shape}")
    if image.shape[:2] == (h, w):
        return image
    resample = RESAMPLE[lm.image.resample if lm.image is not None else 2]
    return np.asarray(Image.fromarray(image).resize((w, h), resample))  # [h, w, 3]


def image_capture(lm, image: np.ndarray, backend: str = "eager") -> CapturedRun:
    """The captured run of `lm` over one image (CLS + patches), with its top classes."""
    return lm.capture(lm.encode_image(model_view(lm, image)), backend=backend)


def prediction(run: CapturedRun) -> list[tuple[str, float]]:
    """(class name, probability) of the top classes, best first."""
    if run.top_tokens is None:
        raise InputError(f"{run.model} has no classification head")
    return [(str(n), float(p)) for n, p in zip(run.top_tokens[0], run.top_probs[0])]


def head_maps(run: CapturedRun, layer: int, query: int = 0, prefix: int = 1) -> np.ndarray:
    """Attention from token `query` to the patches for every head of `layer`: [H, rows, cols]."""
    return np.stack([vision.patch_map_cls(run, layer, h, query, prefix) for h in range(run.n_heads)])


def run_map(run: CapturedRun, kind: str, *, layer: int = 0, head: int | None = None, query: int = 0,
            fusion: str = "mean", discard: float = 0.0, prefix: int = 1) -> np.ndarray:
    """A map read from the run alone: 'attention' (token `query` at `layer`, one head or the mean) or 'rollout'."""
    if kind == "attention":
        return vision.patch_map_cls(run, layer, head, query, prefix)
    if kind == "rollout":
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}")
        return vision.rollout_map(run, fusion, discard, prefix)
    raise ValueError(f"{kind!r} needs the model's gradients: use gradient_map")


def mixing_layers(lm, image: np.ndarray, kind: str) -> np.ndarray:
    """'attention norm' or 'value zeroing' of every layer over CLS + patches: [L, T, T] (one map per layer and
    token: `mixing_map`)."""
    if kind not in MIXING:
        raise ValueError(f"unknown map kind {kind!r}; one of {', '.join(MIXING)}")
    return context_mixing(lm, lm.encode_image(model_view(lm, image)), MIXING[kind])


def mixing_map(layers: np.ndarray, layer: int, query: int = 0, prefix: int = 1) -> np.ndarray:
    """What token `query` takes from each patch at `layer`, from mixing_layers' [L, T, T]: [rows, cols]."""
    return vision.patch_scores(layers[layer, query], prefix)


def gradient_map(lm, image: np.ndarray, kind: str, target: int | None = None, discard: float = 0.0) -> np.ndarray:
    """A map that needs a backward pass for class `target` (None = predicted): 'gradient rollout', 'relevance' or
    one of ATTRIBUTIONS (analysis.probes.attributions, each patch's score)."""
    inputs = lm.encode_image(model_view(lm, image))
    if kind == "gradient rollout":
        return vision.grad_rollout_map(lm, inputs, target, discard)
    if kind == "relevance":
        return vision.relevance_map(lm, inputs, target)
    if kind in ATTRIBUTIONS:
        return vision.patch_scores(attribute(lm, inputs, ATTRIBUTIONS[kind], 0, target).row, lm.cfg.n_prefix)
    raise ValueError(f"unknown map kind {kind!r}; one of {', '.join(MAP_KINDS)}")


def region_report(maps: dict[str, np.ndarray], region: np.ndarray) -> list[dict]:
    """Per map: the share of its mass inside the region, whether its top patch is inside (the pointing game),
    and chance (the region's share of the image)."""
    chance = float(np.asarray(region).mean())
    return [{"map": name, "share inside": vision.region_share(m, region), "top patch inside": vision.pointing_hit(m, region),
             "chance": chance} for name, m in maps.items()]



def class_names(lm) -> list[str]:
    """The model's class names, one per class."""
    return list(lm.class_names)


def paper_pictures(lm, images: list[np.ndarray]) -> dict:
    """The ViT paper's two pictures as numbers, for `images` (uint8 [H, W, 3] each): `distance` [L, H], the mean
    attention distance in pixels averaged over the images; its `trend` (vision.distance_trend); `uniform`, the
    distance of attention spread evenly; `grid_r`, the position embeddings' grid correlation."""
    if not images:
        raise InputError("the ViT paper's pictures need at least one image")
    grid, patch = lm.patch_grid, lm.image_size[0] // lm.patch_grid[0]
    prefix = lm.cfg.n_prefix
    dist = np.mean([vision.mean_attention_distance(image_capture(lm, im), grid, patch, prefix) for im in images], 0)
    return {"distance": dist, "trend": vision.distance_trend(dist), "uniform": vision.uniform_distance(grid, patch),
            "grid_r": vision.grid_correlation(vision.position_similarity(lm), grid)}


def sincos_grid(grid: int, d_model: int) -> float:
    """The grid correlation of the 2-D sine–cosine position table (vision.grid_correlation of its cosine
    similarity): what position embeddings started from that table show before training."""
    p = sinusoidal_2d(grid, d_model).double().numpy()  # [N, D]
    p = p / np.linalg.norm(p, axis=-1, keepdims=True)
    return vision.grid_correlation((p @ p.T).reshape(-1, grid, grid), grid)  # [N, N] -> [N, rows, cols]
