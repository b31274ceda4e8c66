"""Attention on images (a ViT): maps over the patch grid from a CapturedRun or the model, and how much of a
map falls in a known region. numpy in, numpy out; grids are [rows, cols], patches in row-major order after
the prefix tokens ([CLS], and DeiT's [DIST]: `prefix` = cfg.n_prefix), token prefix + r·cols + c.

Rollout follows Gildenblat's vit-explain: heads fused (mean/max/min), the lowest `discard` share of each
layer's fused weights zeroed (never a weight on [CLS]'s column), Â = rownorm((A + I) / 2), R = Â_L ··· Â_1;
the map is R's [CLS] row over the patches. Gradient rollout weights each pattern by its gradient first:
A ← mean_h relu(∂y/∂A ⊙ A) (y the target class logit)."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.analysis.attention.rollout import fuse_heads, rownorm
from attnlab.analysis.probes.relevance import attention_sites, gradient_relevance, positive_grad_mean
from attnlab.model.inputs import InputError

Grid = tuple[int, int]


def _grid(n_tokens: int, prefix: int = 1) -> Grid:
    g = int(round(max(n_tokens - prefix, 0) ** 0.5))
    if g < 1 or g * g != n_tokens - prefix:
        raise ValueError(f"{n_tokens} tokens are not {prefix} prefix token(s) + a square grid of patches")
    return g, g


def _on_grid(row: np.ndarray, prefix: int = 1) -> np.ndarray:
    """A [T] row over the prefix tokens + patches → its patches as [rows, cols]."""
    return np.asarray(row[prefix:], dtype=np.float64).reshape(_grid(len(row), prefix))  # [N] -> [rows, cols]


def patch_scores(row: np.ndarray, prefix: int = 1) -> np.ndarray:
    """A [T] score row over the prefix tokens + patches → the patches' scores as [rows, cols]."""
    return _on_grid(row, prefix)


def patch_map_cls(run, layer: int, head: int | None, query: int = 0, prefix: int = 1) -> np.ndarray:
    """Attention of token `query` (0 = CLS, prefix + p = patch p) to every patch at `layer`, one head or the
    mean over heads (None): [rows, cols]. The weights on the prefix tokens are left out (the map does not sum
    to 1)."""
    recs = run.layer_records("self")
    if not 0 <= layer < len(recs):
        raise InputError(f"layer {layer} is outside 0..{len(recs) - 1}")
    rec = recs[layer]
    if not 0 <= query < rec.q_len:
        raise InputError(f"query {query} is outside 0..{rec.q_len - 1}")
    if head is not None and not 0 <= head < rec.n_heads:
        raise InputError(f"head {head} is outside 0..{rec.n_heads - 1}")
    a = rec.pattern(head)  # [q, k] or [H, q, k]
    row = a[query] if head is not None else a[:, query].mean(0)  # [k]
    return _on_grid(row, prefix)


def discard_flat(a: np.ndarray, share: float) -> np.ndarray:
    """Zero the floor(share·q·k) smallest weights of a [q, k] matrix taken as a whole (vit-explain), never one
    in column 0 ([CLS])."""
    if not 0 <= share < 1:
        raise ValueError(f"discard must be in [0, 1), got {share}")
    a = np.array(a, dtype=np.float64)
    n = int(share * a.size)
    if n == 0:
        return a
    ranked = a.copy()
    ranked[:, 0] = np.inf  # [CLS]'s column is never dropped
    n = min(n, a.size - a.shape[0])
    drop = np.argpartition(ranked.ravel(), n - 1)[:n]
    a.ravel()[drop] = 0.0
    return a


def rollout_matrix(fused_layers, discard: float = 0.0) -> np.ndarray:
    """R = Â_L ··· Â_1 with Â = rownorm((discard(A) + I) / 2), from fused [L, T, T] (first layer first)."""
    r = None
    for a in fused_layers:
        m = rownorm((discard_flat(a, discard) + np.eye(a.shape[-1])) / 2)  # [T, T]
        r = m if r is None else m @ r
    if r is None:
        raise ValueError("no layers given")
    return r


def rollout_map(run, fusion: str = "mean", discard: float = 0.0, prefix: int = 1) -> np.ndarray:
    """Attention rollout's [CLS] row over the patches: [rows, cols] (vit-explain semantics)."""
    fused = fuse_heads(run.matrices("self"), fusion)  # [L, H, T, T] -> [L, T, T]
    return _on_grid(rollout_matrix(fused, discard)[0], prefix)


def grad_rollout_map(lm, inputs, target: int | None = None, discard: float = 0.0) -> np.ndarray:
    """Gradient-weighted rollout for class `target` (None = the predicted one): each layer's pattern becomes
    mean_h relu(∂y/∂A ⊙ A), then rollout as in rollout_map. [rows, cols]."""
    sites = attention_sites(lm.model)
    was_training = lm.model.training
    lm.model.eval()
    try:
        out = lm.forward(inputs, names="*.hook_pattern", records=False, grad=True)
        logits = _class_logits(lm, out.logits)
        tid = int(logits.argmax()) if target is None else _check_target(int(target), logits.shape[-1])
        pats = [out.capture.tensors[f"{m.site}.hook_pattern"][0] for m in sites]  # each [1, H, T, T]
        grads = torch.autograd.grad(logits[tid], pats)
    finally:
        lm.model.train(was_training)
    return _on_grid(grad_rollout_matrix(pats, grads, discard)[0], lm.cfg.n_prefix)


def grad_rollout_matrix(patterns, grads, discard: float = 0.0) -> np.ndarray:
    """Rollout of the gradient-weighted patterns mean_h relu(∂y/∂A ⊙ A): per layer [1, H, T, T] tensors → [T, T]."""
    return rollout_matrix([positive_grad_mean(p, g) for p, g in zip(patterns, grads)], discard)


def relevance_map(lm, inputs, target: int | None = None) -> np.ndarray:
    """Chefer et al.'s gradient relevance (analysis/probes/relevance.py) of each patch for class `target` read from
    [CLS] (None = the predicted class): [rows, cols]."""
    if not lm.reads_image:
        raise InputError(f"{lm.name} reads text; relevance maps on a patch grid need a ViT")
    if not lm.cfg.n_classes:
        raise InputError(f"{lm.name} has no image classifier; this map needs a ViT with classes")
    if target is not None:
        _check_target(int(target), lm.cfg.n_classes)
    return _on_grid(gradient_relevance(lm, inputs, position=0, target_id=target).row, lm.cfg.n_prefix)


def _class_logits(lm, logits) -> torch.Tensor:
    if not lm.reads_image or logits is None or not lm.cfg.n_classes:
        raise InputError(f"{lm.name} has no image classifier; this map needs a ViT with classes")
    return logits[0]  # [classes]


def _check_target(t: int, n: int) -> int:
    if not 0 <= t < n:
        raise InputError(f"class {t} is outside 0..{n - 1}")
    return t


# -- regions ---------------------------------------------------------------------------------------------
def patch_region(mask: np.ndarray, grid) -> np.ndarray:
    """The share of each patch inside a bool pixel mask [H, W]: float [rows, cols]."""
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    m = np.asarray(mask, dtype=np.float64)
    h, w = m.shape
    if h % rows or w % cols:
        raise ValueError(f"a {h}×{w} mask does not split into a {rows}×{cols} grid of patches")
    return m.reshape(rows, h // rows, cols, w // cols).mean(axis=(1, 3))  # [H, W] -> [r, ph, c, pw] -> [r, c]


def region_share(map_: np.ndarray, region: np.ndarray) -> float:
    """The share of a non-negative map's mass inside the region (each patch weighted by its share inside)."""
    m = np.clip(np.asarray(map_, dtype=np.float64), 0, None)
    total = m.sum()
    return float((m * region).sum() / total) if total > 0 else 0.0


def pointing_hit(map_: np.ndarray, region: np.ndarray) -> bool:
    """The pointing game: is the map's top patch (any part of it) inside the region?"""
    return bool(np.asarray(region).ravel()[int(np.argmax(map_))] > 0)


# -- the ViT paper's pictures ----------------------------------------------------------------------------
def mean_attention_distance(run, grid, patch_size: int, prefix: int = 1) -> np.ndarray:
    """Per layer and head, the attention-weighted distance in pixels between a patch query and the patches it
    attends to, averaged over patch queries (Dosovitskiy et al. 2021, fig. 7; the `prefix` tokens left out on both sides,
    each query's weights on patches renormalised): [L, H]."""
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    r, c = np.divmod(np.arange(rows * cols), cols)  # [N] each
    dist = patch_size * np.hypot(r[:, None] - r[None], c[:, None] - c[None])  # [N, N] pixels
    a = run.matrices("self")[:, :, prefix:, prefix:].astype(np.float64)  # [L, H, N, N] patches only
    a = a / np.clip(a.sum(-1, keepdims=True), 1e-12, None)
    return (a * dist).sum(-1).mean(-1)  # [L, H]


def position_similarity(lm) -> np.ndarray:
    """Cosine similarity of each patch's position embedding with every patch's: [N, rows, cols]."""
    pos = lm.model.embed.positions() if lm.reads_image else None
    if pos is None:
        raise InputError(f"{lm.name} has no patch position embeddings")
    p = pos[lm.cfg.n_prefix:].detach().double().cpu().numpy()  # [N, D] patches only
    p = p / np.clip(np.linalg.norm(p, axis=-1, keepdims=True), 1e-12, None)
    rows, cols = lm.patch_grid
    return (p @ p.T).reshape(-1, rows, cols)  # [N, N] -> [N, rows, cols]


def distance_trend(distance: np.ndarray) -> dict:
    """What mean attention distance [L, H] does with depth: per layer the mean and the range over heads, and
    the last layer's mean over the first's (`ratio`)."""
    d = np.asarray(distance, dtype=np.float64)
    means = d.mean(1)
    return {"layer_mean": means, "layer_min": d.min(1), "layer_max": d.max(1),
            "ratio": float(means[-1] / max(means[0], 1e-12))}


def uniform_distance(grid, patch_size: int) -> float:
    """The mean attention distance of a head that spreads its attention evenly over every patch (pixels): the
    value a head shows when it does not look near or far."""
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    r, c = np.divmod(np.arange(rows * cols), cols)  # [N] each
    return float(patch_size * np.hypot(r[:, None] - r[None], c[:, None] - c[None]).mean())


def grid_correlation(similarity: np.ndarray, grid) -> float:
    """Pearson correlation, over all pairs of different patches, between the cosine similarity of their position
    embeddings (`similarity` [N, rows, cols]) and minus their distance on the patch grid: near 1 when nearby
    patches have similar embeddings (a learned 2-D layout), near 0 when the embeddings show no grid."""
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    r, c = np.divmod(np.arange(rows * cols), cols)  # [N] each
    dist = np.hypot(r[:, None] - r[None], c[:, None] - c[None])  # [N, N] in patches
    sim = np.asarray(similarity, dtype=np.float64).reshape(rows * cols, rows * cols)  # [N, rows, cols] -> [N, N]
    off = ~np.eye(rows * cols, dtype=bool)
    return float(np.corrcoef(sim[off], -dist[off])[0, 1])
