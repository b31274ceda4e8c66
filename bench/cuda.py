"""The CUDA section of `attnlab bench` (`--device cuda`): a GPT-2-small-shaped model (n_positions 32,768) in
bfloat16 on one GPU, each mode at T = 1k … 32k — our fused flash forward, lazy and eager captures, and
transformers' GPT-2 with eager attention returning its attentions and with sdpa. Times are medians of CUDA
events after warm-up; memory is torch.cuda.max_memory_allocated above the loaded models.

`measure_cuda` needs a GPU; the rest (rows, table, targets) is pure and unit-tested with fake timings.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from bench.specs import GB, GPT2_SMALL, predicted_bytes

SCHEMA = "attnlab-bench-cuda/1"
CUDA_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
CUDA_MODES = ("fused_flash", "lazy_capture", "eager_capture", "hf_eager_attentions", "hf_sdpa")
GPT2_LONG = GPT2_SMALL | {"n_positions": max(CUDA_LENGTHS)}
TARGET_T = 4096  # lazy_capture / fused_flash is judged here (as on the CPU at 1,024)
LAZY_OVER_FUSED = 1.15
LONGEST_T = max(CUDA_LENGTHS)  # lazy_capture must run at this length


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


def judge_targets(rows: list[dict]) -> list[dict]:
    """The CUDA targets as measured: lazy_capture within LAZY_OVER_FUSED × fused_flash at TARGET_T (median
    of the per-round ratios), and lazy_capture running at LONGEST_T. passed None: not measured."""
    lazy, fused = find(rows, "lazy_capture", TARGET_T), find(rows, "fused_flash", TARGET_T)
    if lazy.get("times_ms") and fused.get("times_ms"):
        ratio = statistics.median(a / b for a, b in zip(lazy["times_ms"], fused["times_ms"]))
        first = {"name": f"lazy_capture / fused_flash at T={TARGET_T}", "target": f"≤ {LAZY_OVER_FUSED}",
                 "measured": round(ratio, 3), "passed": ratio <= LAZY_OVER_FUSED}
    else:
        first = {"name": f"lazy_capture / fused_flash at T={TARGET_T}", "target": f"≤ {LAZY_OVER_FUSED}",
                 "measured": None, "passed": None}
    longest = find(rows, "lazy_capture", LONGEST_T)
    ran = "median_ms" in longest
    second = {"name": f"lazy_capture runs at T={LONGEST_T}", "target": "runs", "passed": ran if longest else None,
              "measured": f"{longest['median_ms']:.1f} ms" if ran else longest.get("skipped")}
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
    from bench.forward import forward_fn

    if mode == "fused_flash":
        return lambda: ours(ids, backend="flash").logits
    return forward_fn(mode, ours, hf, ids)


def measure_cuda(lengths=CUDA_LENGTHS, repeats: int = 5, warmup: int = 2, dtype=None, folder=None,
                 progress: Callable[[str], None] | None = None) -> dict:  # pragma: no cover - needs CUDA
    """Every mode at every length on the GPU; a mode predicted not to fit in 90 % of the free memory, or
    that runs out of it, is a skipped row."""
    import tempfile
    from pathlib import Path

    import torch

    from bench.forward import load_hf_gpt2, load_ours_gpt2, token_ids
    from bench.specs import save_gpt2_weights
    from model.device import dtype_name
    from model.hf.convert import gpt2_config

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
    out = {"schema": SCHEMA, "device": torch.cuda.get_device_name(0), "dtype": dtype_name(dtype),
           "torch": torch.__version__, "repeats": repeats, "warmup": warmup, "rows": rows}
    return out | {"targets": judge_targets(rows)}
