"""Soak (issue 9, marked slow): 200 reruns of the heaviest page in one AppTest session; memory must not
grow without bound (RSS after warm-up vs at the end; target < 50 MB).

Heatmaps draws the most per rerun (the all-heads mosaic, one head, the head view, the zoom window). The
texts cycle through more distinct values than the capture cache holds (max_entries), so every rerun
captures again and the cache keeps evicting; layer, head, matrix kind and head fusion change too.
Run with `pytest -m slow tests/app/test_soak.py -s`; the numbers go to artifacts/reliability.json.

What is measured: RSS after `gc.collect()` and glibc's `malloc_trim(0)`, i.e. the memory the process
still holds. Raw RSS swings by ±80 MB from one rerun to the next (glibc keeps freed heap pages of the
large temporary arrays and figure JSON on its free lists and reuses them), so a single raw reading
says little; it is sampled every 20 reruns and reported too (its spread and its trend).
"""

from __future__ import annotations

import ctypes
import gc
import time

import pytest

from tests.app.conftest import open_page, specs
from tests.app.reliability import errors, no_exception, report

RERUNS = 200
WARMUP = 60
N_TEXTS = 60  # > state.capture's max_entries (48): the cache evicts on every lap
MAX_GROWTH_MB = 50
KINDS = ("pattern", "scores", "masked")
FUSE = ("none", "none", "mean", "max")


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed heap pages back to the OS (glibc only)
    except (OSError, AttributeError):
        pass


def rss_mb(trim: bool = False) -> float:
    gc.collect()
    if trim:
        _trim()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def text(i: int) -> str:
    """Distinct texts of 100–160 characters (random-decoder: one token per byte)."""
    base = f"soak {i % N_TEXTS}: the cat sat on the mat <b>because</b> the mat was warm & the dog was not. "
    return (base * 3)[: 100 + (i % N_TEXTS)]


def set_index(at, key: str, value: int) -> None:
    """Layer and head pickers are buttons (a segmented control) for few values, a slider for many."""
    for kind in ("button_group", "slider", "selectbox"):
        try:
            getattr(at, kind)(key=key).set_value(value)
            return
        except KeyError:
            continue
    raise KeyError(key)


def rerun(at, i: int) -> int:
    """One step of the soak: a new text and matrix options, then (every other step) new sliders."""
    at.text_area(key="text").set_value(text(i))
    at.selectbox(key="kind").set_value(KINDS[i % len(KINDS)])
    at.selectbox(key="fuse").set_value(FUSE[(i // 3) % len(FUSE)])
    at.run()
    no_exception(at)
    assert not errors(at), errors(at)
    if i % 2:  # a second rerun: pick another layer / head on the drawn page
        set_index(at, "layer", i % 2)
        if FUSE[(i // 3) % len(FUSE)] == "none":
            set_index(at, "head", i % 4)
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
    raw0, before = rss_mb(), rss_mb(trim=True)
    raw, held = [raw0], [before]
    t0 = time.perf_counter()
    runs = 0
    for i in range(WARMUP, WARMUP + RERUNS):
        runs += rerun(at, i)
        if (i - WARMUP) % 20 == 19:
            raw.append(rss_mb())
            held.append(rss_mb(trim=True))
    seconds = time.perf_counter() - t0
    after = held[-1]
    half = len(held) // 2
    numbers = {"page": "heatmaps", "model": "random-decoder", "warmup_reruns": WARMUP, "reruns": RERUNS,
               "script_runs": runs, "seconds": round(seconds, 1),
               "rss_after_warmup_mb": round(before, 1), "rss_end_mb": round(after, 1),
               "growth_mb": round(after - before, 1),
               "raw_rss_mb": {"after_warmup": round(raw0, 1), "end": round(raw[-1], 1), "min": round(min(raw), 1),
                              "max": round(max(raw), 1)},
               "held_rss_mb_every_20": [round(x, 1) for x in held]}
    report(soak=numbers)
    assert after - before < MAX_GROWTH_MB
    # no trend either: the second half's samples are not above the first half's by the target
    assert max(held[half:]) - max(held[:half]) < MAX_GROWTH_MB
