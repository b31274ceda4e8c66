"""Soak (issue 9, marked slow): 200 reruns of the heaviest page in one AppTest session; memory must not
grow without bound (RSS after warm-up vs at the end; target < 50 MB).

Heatmaps draws the most per rerun (the all-heads mosaic, one head, the head view, the zoom window). The
texts cycle through more distinct values than the capture cache holds (max_entries), so every rerun
captures again and the cache keeps evicting; layer, head, matrix kind and head fusion change too.
Run with `pytest -m slow tests/app/test_soak.py -s`; the numbers go to artifacts/reliability.json.
"""

from __future__ import annotations

import gc
import time

import pytest

from tests.app.conftest import open_page, specs
from tests.app.test_reliability import errors, no_exception, report

RERUNS = 200
WARMUP = 60
N_TEXTS = 60  # > state.capture's max_entries (48): the cache evicts on every lap
MAX_GROWTH_MB = 50
KINDS = ("pattern", "scores", "masked")
FUSE = ("none", "none", "mean", "max")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def text(i: int) -> str:
    """Distinct texts of 100–160 characters (random-decoder: one token per byte)."""
    base = f"soak {i % N_TEXTS}: the cat sat on the mat <b>because</b> the mat was warm & the dog was not. "
    return (base * 3)[: 100 + (i % N_TEXTS)]


def rerun(at, i: int) -> int:
    """One step of the soak: a new text and matrix options, then (every other step) new sliders."""
    at.text_area(key="text").set_value(text(i))
    at.selectbox(key="kind").set_value(KINDS[i % len(KINDS)])
    at.selectbox(key="fuse").set_value(FUSE[(i // 3) % len(FUSE)])
    at.run()
    no_exception(at)
    assert not errors(at), errors(at)
    if i % 2:  # a second rerun: move the layer / head sliders of the drawn page
        at.slider(key="layer").set_value(i % 2)
        if FUSE[(i // 3) % len(FUSE)] == "none":
            at.slider(key="head").set_value(i % 4)
        at.run()
        no_exception(at)
    assert len(specs(at)) >= 3
    return 1 + i % 2


@pytest.mark.slow
def test_soak_heatmaps_memory():
    at = open_page("heatmaps", model="random-decoder", text=text(0))
    no_exception(at)
    for i in range(WARMUP):
        rerun(at, i)
    gc.collect()
    before = rss_mb()
    t0 = time.perf_counter()
    runs = sum(rerun(at, i) for i in range(WARMUP, WARMUP + RERUNS))
    seconds = time.perf_counter() - t0
    gc.collect()
    after = rss_mb()
    growth = after - before
    report(soak={"page": "heatmaps", "model": "random-decoder", "warmup_reruns": WARMUP, "reruns": RERUNS, "script_runs": runs,
                 "rss_after_warmup_mb": round(before, 1), "rss_end_mb": round(after, 1),
                 "growth_mb": round(growth, 1), "seconds": round(seconds, 1)})
    assert growth < MAX_GROWTH_MB
