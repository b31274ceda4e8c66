"""Generated images for lecture-vit whose answer region is known: a dark canvas with 2–5 coloured shapes, exactly
one of them red; the label is the red object's shape and `mask` holds exactly its pixels.

Seeded and split like the text corpus: a draw is "eval" or "train" by a hash of its pixels and label (one in
EVAL_BUCKETS is eval), so no image is in both splits; each split draws from its own seeded generator."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

IMAGE_SIZE = 32  # pixels per side (lecture-vit's input)
CLASSES = ("square", "circle", "triangle", "cross")
RED = (220, 30, 30)
DISTRACTORS = {"green": (40, 170, 70), "blue": (50, 90, 230), "yellow": (230, 200, 40), "white": (235, 235, 235)}
BACKGROUND = (25, 25, 35)
SIZES = (8, 13)  # a shape's bounding box side, min..max−1 pixels (at IMAGE_SIZE; scaled with the canvas)
MIN_SIZE = 2 * 3 + 1  # the smallest canvas: two 3-pixel shapes and the free pixel between them
EVAL_BUCKETS = 8
SPLITS = ("train", "eval")


@dataclass
class ShapeImage:
    image: np.ndarray  # uint8 [H, W, 3]
    mask: np.ndarray  # bool [H, W]: the pixels of the object that decides the label (the red one)
    label: int  # index into CLASSES
    label_name: str
    description: str


def shape_mask(kind: str, s: int) -> np.ndarray:
    """bool [s, s] of one shape filling an s×s box."""
    y, x = np.mgrid[0:s, 0:s]  # [s, s] each
    c = (s - 1) / 2
    if kind == "square":
        return np.ones((s, s), dtype=bool)
    if kind == "circle":
        return (y - c) ** 2 + (x - c) ** 2 <= (s / 2) ** 2
    if kind == "triangle":  # apex up: row i is 2·(i + 1)·s/(2s) wide
        return np.abs(x - c) <= (y + 1) / 2
    if kind == "cross":
        t = max(1, s // 3) / 2
        return (np.abs(x - c) <= t) | (np.abs(y - c) <= t)
    raise ValueError(f"unknown shape {kind!r}; one of {', '.join(CLASSES)}")


def split_of(image: np.ndarray, label: int) -> str:
    """"eval" or "train", from a hash of the pixels and the label."""
    h = hashlib.sha256(image.tobytes() + bytes([label])).hexdigest()
    return "eval" if int(h[:8], 16) % EVAL_BUCKETS == 0 else "train"


def _place(rng: np.random.Generator, sizes: list[int], size: int) -> list[tuple[int, int]] | None:
    """Top-left corners of non-touching boxes (a free pixel between any two), or None."""
    boxes: list[tuple[int, int, int]] = []
    for s in sizes:
        for _ in range(50):
            y, x = (int(v) for v in rng.integers(0, size - s + 1, 2))
            if all(y + s + 1 <= by or by + bs + 1 <= y or x + s + 1 <= bx or bx + bs + 1 <= x for by, bx, bs in boxes):
                boxes.append((y, x, s))
                break
        else:
            return None
    return [(y, x) for y, x, _ in boxes]


def shape_sizes(size: int) -> tuple[int, int]:
    """A shape's box side on a `size`-pixel canvas, min..max−1: SIZES scaled with the canvas, at least 3 pixels,
    small enough that two shapes always fit side by side."""
    if size < MIN_SIZE:
        raise ValueError(f"generated shapes need a canvas of at least {MIN_SIZE} pixels, not {size}")
    lo = min(max(3, SIZES[0] * size // IMAGE_SIZE), (size - 1) // 2)
    return lo, max(lo + 1, min(SIZES[1] * size // IMAGE_SIZE, (size - 1) // 2 + 1))


def draw(rng: np.random.Generator, size: int = IMAGE_SIZE) -> ShapeImage:
    """One canvas: 2–5 shapes, the first red; distractors in the other colours, any shape."""
    sizes_range = shape_sizes(size)
    while True:  # ends: two shapes of at most (size − 1) // 2 pixels always fit
        n = int(rng.integers(2, 6))
        kinds = [CLASSES[int(i)] for i in rng.integers(0, len(CLASSES), n)]
        sizes = [int(s) for s in rng.integers(*sizes_range, n)]
        corners = _place(rng, sizes, size)
        if corners is not None:
            break
    names = list(DISTRACTORS)
    colours = [("red", RED)] + [(c, DISTRACTORS[c]) for c in (names[int(i)] for i in rng.integers(0, len(names), n - 1))]
    image = np.empty((size, size, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    mask = np.zeros((size, size), dtype=bool)
    for i, (kind, s, (y, x), (_, rgb)) in enumerate(zip(kinds, sizes, corners, colours)):
        m = shape_mask(kind, s)
        image[y:y + s, x:x + s][m] = rgb
        if i == 0:
            mask[y:y + s, x:x + s] = m
    others = ", ".join(f"a {c} {k}" for k, (c, _) in zip(kinds[1:], colours[1:]))
    label = CLASSES.index(kinds[0])
    return ShapeImage(image, mask, label, kinds[0], f"a red {kinds[0]} among {others}")


def shape_images(n: int, seed: int, split: str = "eval", size: int = IMAGE_SIZE) -> list[ShapeImage]:
    """`n` images of `split`, the same for the same (n, seed, split)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    key = int(hashlib.sha256(f"attnlab.shapes|{split}|{int(seed)}".encode()).hexdigest()[:16], 16)
    rng = np.random.default_rng(key)
    out: list[ShapeImage] = []
    while len(out) < n:
        ex = draw(rng, size)
        if split_of(ex.image, ex.label) == split:
            out.append(ex)
    return out
