"""Generated images for lecture-vit whose answer region is known: a dark canvas with 2–5 coloured shapes, exactly
one red and one blue; the label is where the red object lies relative to the blue one (left, right, above, below:
the larger of the horizontal and vertical offsets between their centres, never a near tie) and `mask` holds
exactly the pixels of those two objects.

Seeded and split like the text corpus: a draw is "eval" or "train" by a hash of its pixels and label (one in
EVAL_BUCKETS is eval), so no image is in both splits; each split draws from its own seeded generator."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

IMAGE_SIZE = 32  # pixels per side (lecture-vit's input)
CLASSES = ("left", "right", "above", "below")  # where the red object lies relative to the blue one
SHAPES = ("square", "circle", "triangle", "cross")
RED = (220, 30, 30)
BLUE = (50, 90, 230)
DISTRACTORS = {"green": (40, 170, 70), "yellow": (230, 200, 40), "white": (235, 235, 235)}
BACKGROUND = (25, 25, 35)
SIZES = (8, 13)  # a shape's bounding box side, min..max−1 pixels (at IMAGE_SIZE; scaled with the canvas)
MIN_SIZE = 2 * 3 + 1  # the smallest canvas: two 3-pixel shapes and the free pixel between them
MARGIN = 2  # pixels (at IMAGE_SIZE, at least 1): the larger offset exceeds the smaller by at least this much
EVAL_BUCKETS = 8
SPLITS = ("train", "eval")


@dataclass
class ShapeImage:
    image: np.ndarray  # uint8 [H, W, 3]
    mask: np.ndarray  # bool [H, W]: the pixels of the objects that decide the label (the red and the blue one)
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
    raise ValueError(f"unknown shape {kind!r}; one of {', '.join(SHAPES)}")


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


def relation(a: tuple[int, int, int], b: tuple[int, int, int], margin: int) -> int | None:
    """Where box a = (y, x, side) lies relative to box b, as an index into CLASSES; None for a near tie."""
    dy, dx = (a[0] + a[2] / 2) - (b[0] + b[2] / 2), (a[1] + a[2] / 2) - (b[1] + b[2] / 2)  # centre offsets
    if abs(abs(dx) - abs(dy)) < margin:
        return None
    return (0 if dx < 0 else 1) if abs(dx) > abs(dy) else (2 if dy < 0 else 3)


def draw(rng: np.random.Generator, size: int = IMAGE_SIZE) -> ShapeImage:
    """One canvas: 2–5 shapes of any kind, the first red, the second blue, the others in the distractor colours."""
    sizes_range = shape_sizes(size)
    margin = max(1, MARGIN * size // IMAGE_SIZE)
    while True:  # ends: two shapes of at most (size − 1) // 2 pixels always fit, side by side or stacked
        n = int(rng.integers(2, 6))
        kinds = [SHAPES[int(i)] for i in rng.integers(0, len(SHAPES), n)]
        sizes = [int(s) for s in rng.integers(*sizes_range, n)]
        corners = _place(rng, sizes, size)
        if corners is None:
            continue
        label = relation((*corners[0], sizes[0]), (*corners[1], sizes[1]), margin)
        if label is not None:
            break
    names = list(DISTRACTORS)
    colours = [("red", RED), ("blue", BLUE)] + [(c, DISTRACTORS[c])
                                               for c in (names[int(i)] for i in rng.integers(0, len(names), n - 2))]
    image = np.empty((size, size, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    mask = np.zeros((size, size), dtype=bool)
    for i, (kind, s, (y, x), (_, rgb)) in enumerate(zip(kinds, sizes, corners, colours)):
        m = shape_mask(kind, s)
        image[y:y + s, x:x + s][m] = rgb
        if i < 2:
            mask[y:y + s, x:x + s] |= m
    where = {"left": "left of", "right": "right of", "above": "above", "below": "below"}[CLASSES[label]]
    others = ", ".join(f"a {c} {k}" for k, (c, _) in zip(kinds[2:], colours[2:]))
    return ShapeImage(image, mask, label, CLASSES[label],
                      f"a red {kinds[0]} {where} a blue {kinds[1]}" + (f", among {others}" if others else ""))


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
