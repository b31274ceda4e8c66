"""A training run's learning curve (held-out accuracy per task vs step): the jump, and a PNG picture
drawn with Pillow (no plotting library needed).

A curve is a list of points {"step": int, "seconds": float, task: accuracy, ...}, as `train()` returns.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
SIZE, MARGIN = (760, 420), (60, 20, 190, 40)  # width, height; left, top, right, bottom


def tasks_of(curve: list[dict]) -> list[str]:
    """The curve's task names in first-seen order."""
    names: list[str] = []
    for point in curve:
        names += [k for k in point if k not in ("step", "seconds") and k not in names]
    return names


def jump(curve: list[dict], task: str) -> dict | None:
    """The largest rise of `task` between two consecutive evaluations: {"from_step", "to_step", "before",
    "after"}; None with fewer than two points."""
    pts = [(p["step"], p[task]) for p in curve if task in p]
    if len(pts) < 2:
        return None
    (s0, a0), (s1, a1) = max(zip(pts, pts[1:]), key=lambda ab: ab[1][1] - ab[0][1])
    return {"from_step": s0, "to_step": s1, "before": a0, "after": a1}


def draw(curve: list[dict], path: str | Path, title: str = "") -> Path:
    """Accuracy (0–100%) per task against the training step, one coloured line each, legend on the right."""
    if not curve:
        raise ValueError("an empty curve has nothing to draw")
    img = Image.new("RGB", SIZE, "white")
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    left, top, right, bottom = MARGIN
    w, h = SIZE[0] - left - right, SIZE[1] - top - bottom
    last = max(p["step"] for p in curve)

    def xy(step: float, acc: float) -> tuple[float, float]:
        return left + w * step / max(1, last), top + h * (1 - acc)

    for k in range(6):  # horizontal grid every 20%
        y = top + h * k / 5
        d.line([(left, y), (left + w, y)], fill="#e0e0e0")
        d.text((left - 8, y), f"{100 - 20 * k}%", fill="black", font=font, anchor="rm")
    for k in range(6):  # integer step ticks
        step = round(last * k / 5)
        x = xy(step, 0)[0]
        d.line([(x, top + h), (x, top + h + 4)], fill="black")
        d.text((x, top + h + 6), str(step), fill="black", font=font, anchor="ma")
    d.rectangle([left, top, left + w, top + h], outline="black")
    d.text((left + w / 2, SIZE[1] - 12), "training step", fill="black", font=font, anchor="ms")
    if title:
        d.text((left + w / 2, top - 6), title, fill="black", font=font, anchor="ms")
    for i, task in enumerate(tasks_of(curve)):
        color = COLORS[i % len(COLORS)]
        pts = [xy(p["step"], p[task]) for p in curve if task in p]
        if len(pts) > 1:
            d.line(pts, fill=color, width=2)
        for x, y in pts:
            d.ellipse([x - 2, y - 2, x + 2, y + 2], fill=color)
        ly = top + 14 * i + 6
        d.line([(left + w + 12, ly), (left + w + 32, ly)], fill=color, width=3)
        d.text((left + w + 38, ly), task, fill="black", font=font, anchor="lm")
    path = Path(path)
    img.save(path, format="PNG")
    return path
