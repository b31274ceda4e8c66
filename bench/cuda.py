"""The CUDA section of `attnlab bench` (`--device cuda`): a GPT-2-small-shaped model (n_positions 32,768) in
bfloat16 on one GPU, each mode at T = 1k … 32k — our fused flash forward, lazy and eager captures, and
transformers' GPT-2 with eager attention returning its attentions and with sdpa. Times are medians of CUDA
events after warm-up; memory is torch.cuda.max_memory_allocated above the loaded models.

`measure_cuda` needs a GPU; the rest (rows, table, targets) is pure and unit-tested with fake timings.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from attnlab.bench.specs import GB, GPT2_SMALL, predicted_bytes

SCHEMA = "attnlab-bench-cuda/1"
CUDA_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
CUDA_MODES = ("fused_flash", "lazy_capture", "eager_capture", "hf_eager_attentions", "hf_sdpa")
GPT2_LONG = GPT2_SMALL | {"n_positions": max(CUDA_LENGTHS)}
LAZY_OVER_FUSED = 1.05  # lazy_capture (flash with capture on) within 5 % of fused_flash, at every T
LONGEST_T = max(CUDA_LENGTHS)  # one head's pooled overview is timed at this length
OVERVIEW_S = 1.0  # a 512 × 512 pooled overview of one head at LONGEST_T, on screen within this


# -- pure: rows, targets, table ------------------------------------------------------------------------
def result_row(mode: str, T: int, times_ms: list[float] | None = None, peak_bytes: int | None = None,
               skipped: str | None = None) -> dict:
    """One mode at one length: median and all times (ms) and peak bytes, or why it did not run."""
    row = {"mode": mode, "T": int(T)}
    if skipped is not None:
        return row | {"skipped": skipped}
    return row | {"median_ms": statistics.median(times_ms), "times_ms": list(times_ms), "peak_bytes": peak_bytes}


def find(rows: list[dict], mode: str, T: int) -> dict:
    """The row of `mode` at `T`, or {}."""
    return next((r for r in rows if r["mode"] == mode and r["T"] == T), {})


def judge_targets(rows: list[dict], overview_s: float | None = None) -> list[dict]:
    """The CUDA targets as measured: lazy_capture within LAZY_OVER_FUSED × fused_flash at every T where both
    ran (median of the per-round ratios at each T; the worst T is reported), and one head's pooled overview at
    LONGEST_T within OVERVIEW_S. passed None: not measured."""
    ratios = {}
    for T in sorted({r["T"] for r in rows}):
        lazy, fused = find(rows, "lazy_capture", T), find(rows, "fused_flash", T)
        if lazy.get("times_ms") and fused.get("times_ms"):
            ratios[T] = statistics.median(a / b for a, b in zip(lazy["times_ms"], fused["times_ms"]))
    worst = max(ratios, key=ratios.get) if ratios else None
    first = {"name": "lazy_capture / fused_flash at every T", "target": f"≤ {LAZY_OVER_FUSED}",
             "measured": round(ratios[worst], 3) if ratios else None,
             "passed": all(v <= LAZY_OVER_FUSED for v in ratios.values()) if ratios else None,
             "note": ", ".join(f"T={T}: {v:.3f}" for T, v in ratios.items())}
    second = {"name": f"pooled 512×512 overview of one head at T={LONGEST_T}", "target": f"≤ {OVERVIEW_S:g} s",
              "measured": None if overview_s is None else round(overview_s, 3),
              "passed": None if overview_s is None else overview_s <= OVERVIEW_S}
    return [first, second]


def _cell(row: dict, key: str) -> str:
    if not row:
        return "n/a"
    if "skipped" in row:
        return "skipped"
    v = row.get(key)
    if v is None:
        return "—"
    return f"{v / GB:.2f}" if key == "peak_bytes" else f"{v:.1f}"


def markdown(out: dict) -> str:
    """Two tables (median ms, peak GB) with a row per length and a column per mode, then the targets."""
    rows, lengths = out["rows"], sorted({r["T"] for r in out["rows"]})
    head = "| T | " + " | ".join(CUDA_MODES) + " |\n|---|" + "---|" * len(CUDA_MODES)
    lines = [f"CUDA: {out['device']}, {out['dtype']}, torch {out['torch']}; medians of {out['repeats']} CUDA-event "
             f"timings after {out['warmup']} warm-up.", ""]
    for title, key in (("Median time (ms)", "median_ms"), ("Peak GPU memory above the models (GB)", "peak_bytes")):
        lines += [f"**{title}**", "", head]
        lines += [f"| {T:,} | " + " | ".join(_cell(find(rows, m, T), key) for m in CUDA_MODES) + " |" for T in lengths]
        lines.append("")
    lines += ["| target | wanted | measured | passed |", "|---|---|---|---|"]
    lines += [f"| {t['name']} | {t['target']} | {t['measured'] if t['measured'] is not None else '—'} | "
              f"{ {True: 'yes', False: 'NO', None: '—'}[t['passed']] } |" for t in out["targets"]]
    return "\n".join(lines)


# -- on the GPU ----------------------------------------------------------------------------------------
def cuda_times(fn: Callable, repeats: int, warmup: int) -> list[float]:  # pragma: no cover - needs CUDA
    """Milliseconds per call by CUDA events (the span includes host work inside fn, e.g. a capture's copies)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        del out
    return times


def _forward(mode: str, ours, hf, ids) -> Callable:  # pragma: no cover - needs CUDA
    from attnlab.bench.forward import forward_fn
    from attnlab.model import hooks

    if mode == "fused_flash":
        return lambda: ours(ids, backend="flash").logits
    if mode == "lazy_capture":  # the same flash forward with capture on: records keep q and k only

        def run():
            with hooks.capture() as cap:
                out = ours(ids, backend="flash")
            return out.logits, cap

        return run
    return forward_fn(mode, ours, hf, ids)


def overview_seconds(ours, ids, repeats: int = 3) -> float:  # pragma: no cover - needs CUDA
    """Median wall time of one head's 512 × 512 pooled overview of the last layer after a flash capture."""
    import time

    from attnlab.analysis.attention.long_records import overview
    from attnlab.model import hooks

    with hooks.capture() as cap:
        ours(ids, backend="flash")
    rec = cap[cap.sites[-1]]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        overview(rec, 0, 512, "max")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_cuda(lengths=CUDA_LENGTHS, repeats: int = 5, warmup: int = 2, dtype=None, folder=None,
                 progress: Callable[[str], None] | None = None) -> dict:  # pragma: no cover - needs CUDA
    """Every mode at every length on the GPU; a mode predicted not to fit in 90 % of the free memory, or
    that runs out of it, is a skipped row."""
    import tempfile
    from pathlib import Path

    import torch
    from attnlab.bench.forward import load_hf_gpt2, load_ours_gpt2, token_ids
    from attnlab.bench.specs import save_gpt2_weights
    from attnlab.model.device import dtype_name
    from attnlab.model.families.gpt2 import gpt2_config

    dtype = dtype or torch.bfloat16
    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"hf_config": GPT2_LONG, "weights": str(save_gpt2_weights(Path(folder or tmp), config=GPT2_LONG))}
        ours = load_ours_gpt2(spec)[0].to("cuda", dtype)
        hf = load_hf_gpt2(spec)[0].to("cuda", dtype)
    shape = gpt2_config(dict(GPT2_LONG))
    cfg = {"layers": shape.n_layers, "heads": shape.n_heads, "d_model": shape.d_model, "vocab": shape.vocab_size}
    rows = []
    with torch.no_grad():
        for T in lengths:
            ids = token_ids(T, cfg["vocab"]).cuda()
            for mode in CUDA_MODES:
                say(f"cuda T={T} {mode}")
                base = "fused" if mode == "fused_flash" else mode
                need = predicted_bytes(cfg, base, T) * dtype.itemsize // 4
                free = torch.cuda.mem_get_info()[0]
                if need > 0.9 * free:
                    rows.append(result_row(mode, T, skipped=f"needs ~{need / GB:.0f} GB, {free / GB:.0f} GB free"))
                    continue
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.memory_allocated()
                try:
                    times = cuda_times(_forward(mode, ours, hf, ids), repeats, warmup)
                except torch.cuda.OutOfMemoryError:
                    rows.append(result_row(mode, T, skipped="out of GPU memory"))
                    continue
                rows.append(result_row(mode, T, times, torch.cuda.max_memory_allocated() - start))
        say(f"cuda T={LONGEST_T} pooled overview of one head")
        try:
            overview_s = overview_seconds(ours, token_ids(LONGEST_T, cfg["vocab"]).cuda())
        except torch.cuda.OutOfMemoryError:
            overview_s = None
    out = {"schema": SCHEMA, "device": torch.cuda.get_device_name(0), "dtype": dtype_name(dtype),
           "torch": torch.__version__, "repeats": repeats, "warmup": warmup, "rows": rows, "overview_s": overview_s}
    return out | {"targets": judge_targets(rows, overview_s)}
