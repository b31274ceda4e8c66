"""The Vision page's captions, worded from the numbers they describe (analysis.probes.patch_maps), so they hold for any
checkpoint: mean attention distance by depth, the position embeddings' grid, an upload's aspect ratio."""

from __future__ import annotations

from attnlab.analysis.probes.patch_maps import distance_trend, grid_correlation, uniform_distance

GROWS = 1.2  # the last layer's mean distance over the first's above which "it grows with depth"
GRID_R = 0.5  # correlation of similarity with closeness above which the embeddings "show the grid"


def distance_caption(distance, patch: int, grid=None) -> str:
    """Mean attention distance [L, H] in words: per-layer means and head ranges, whether it grows, and (with
    the patch `grid`) the distance of attention spread evenly over every patch."""
    t = distance_trend(distance)
    per = ", ".join(f"layer {i}: {m:.1f} px ({lo:.1f}–{hi:.1f})" for i, (m, lo, hi)
                    in enumerate(zip(t["layer_mean"], t["layer_min"], t["layer_max"])))
    if t["ratio"] >= GROWS:
        trend = f"it grows with depth (the last layer looks {t['ratio']:.1f}× as far as the first)"
    elif t["ratio"] <= 1 / GROWS:
        trend = f"it shrinks with depth (the last layer looks {t['ratio']:.2f}× as far as the first)"
    else:
        trend = (f"it stays about the same at every depth (last layer / first = {t['ratio']:.2f}): unlike the "
                 "ViT paper's fig. 7, where early layers mix near and far heads and later ones look far")
    even = "" if grid is None else (f" Attention spread evenly over every patch gives "
                                    f"{uniform_distance(grid, patch):.1f} px.")
    return (f"How far (in pixels; a patch is {patch} px) each head looks from a patch, weighted by its attention "
            f"(Dosovitskiy et al., fig. 7). Mean over heads (range over heads): {per}. Here {trend}.{even}")


def position_caption(similarity, grid) -> str:
    """The position embeddings' similarity in words: whether nearby patches have similar embeddings."""
    r = grid_correlation(similarity, grid)
    what = ("nearby patches have similar embeddings: the model learned the 2-D layout of the patches" if r >= GRID_R
            else "the similarity barely follows the distance between patches: these embeddings show no grid (the "
                 "ViT paper's 2-D pattern comes from long training on many images; here the model may find an "
                 "object's shape without knowing exactly where each patch sits)")
    return (f"Tile (r, c) shows how similar patch r,c's position embedding is to every other patch's. Correlation "
            f"of similarity with closeness on the grid: {r:.2f}; {what}.")


def aspect_note(shape, size) -> str | None:
    """A sentence when an image of `shape` (H, W, …) is squeezed to the model's `size` (h, w): its aspect ratio
    changes; None when it keeps it."""
    H, W = shape[:2]
    h, w = size
    if abs(W / H - w / h) < 0.01:
        return None
    return (f"Your image is {W}×{H} pixels (width × height); the model reads {w}×{h}, so it was resized to that "
            f"and its proportions changed ({W / H:.2f} → {w / h:.2f}): shapes look {'narrower' if W / H > w / h else 'wider'} "
            "to the model than in your file. Crop it to a square first to keep them.")
