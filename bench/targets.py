"""The issue's targets, judged from a benchmark result as measured (None: not measured in this run)."""

from __future__ import annotations

import statistics

from attnlab.analysis.machinery.bench_report import Payload, Result, Target, Top
from attnlab.bench.specs import GB
from attnlab.bench.view_targets import view_targets

TARGETS = {
    "lazy_over_fused_T1024": 1.15,
    "lazy_peak_over_fused_T4096_bytes": 1 * GB,
    "overview_T4096_s": 1.0,
    "rollout_T4096_s": 10.0,
    "payload_bytes": 2_000_000,
    "smollm2_lazy_over_fused": 1.05,  # at T = 128 and 512 (issue 32)
}
SMOLLM2 = "smollm2"


def _row(out: dict, model: str, T: int, mode: str) -> dict:
    for r in out[Top.RESULTS]:
        if (r[Result.MODEL], r[Result.T], r[Result.MODE]) == (model, T, mode):
            return r
    return {}


def _target(name: str, target: str, measured, passed, note: str = "") -> dict:
    return {Target.NAME: name, Target.TARGET: target, Target.MEASURED: measured, Target.PASSED: passed,
            Target.NOTE: note}


def paired_ratio(a: dict, b: dict) -> float | None:
    """Median over rounds of a's time / b's time in the same round (the modes run interleaved, so a
    busy machine slows both alike within a round); None when either was not timed."""
    if not a.get("times_s") or not b.get("times_s"):
        return None
    return statistics.median(x / y for x, y in zip(a["times_s"], b["times_s"]))


def evaluate_targets(out: dict, model: str = "gpt2-small") -> list[dict]:
    """The issue's targets, each as measured (passed None: not measured in this run). Time ratios are
    judged by the median of the per-round ratios; the ratio of the medians is given in the note."""
    t = []
    fused, lazy = _row(out, model, 1024, "fused"), _row(out, model, 1024, "lazy_capture")
    paired = paired_ratio(lazy, fused)
    if paired is not None:
        t.append(_target("lazy_capture / fused at T=1024", "≤ 1.15", round(paired, 3), paired <= 1.15,
                         f"median of {len(lazy['times_s'])} per-round ratios; ratio of the medians "
                         f"{lazy['time_s'] / fused['time_s']:.3f} ({lazy['time_s']:.2f} s vs {fused['time_s']:.2f} s)"))
    else:
        t.append(_target("lazy_capture / fused at T=1024", "≤ 1.15", None, None, "not measured"))
    lengths = sorted({r["T"] for r in out["results"] if r["model"] == model})
    for T in lengths:
        ours, hf = _row(out, model, T, "eager_capture"), _row(out, model, T, "hf_eager_attentions")
        name = f"eager_capture ≤ hf_eager_attentions at T={T}"
        ratio = paired_ratio(ours, hf)
        if ratio is not None:
            t.append(_target(name, "ratio ≤ 1", round(ratio, 3), ratio <= 1.0,
                             f"medians {ours['time_s']:.2f} s vs {hf['time_s']:.2f} s (ratio "
                             f"{ours['time_s'] / hf['time_s']:.3f})"))
        else:
            why = ours.get("skipped") or hf.get("skipped") or ours.get("error") or hf.get("error") or "not measured"
            t.append(_target(name, "ratio ≤ 1", None, None, why))
    T = 4096
    f4, l4 = _row(out, model, T, "fused"), _row(out, model, T, "lazy_capture")
    if "peak_rss_bytes" in f4 and "peak_rss_bytes" in l4:
        extra = l4["peak_rss_bytes"] - f4["peak_rss_bytes"]
        t.append(_target("lazy_capture peak memory over the model's own (fused) at T=4096", "≤ 1 GB",
                         round(extra / GB, 3), extra <= TARGETS["lazy_peak_over_fused_T4096_bytes"],
                         f"lazy {l4['peak_above_baseline_bytes'] / GB:.2f} GB and fused "
                         f"{f4['peak_above_baseline_bytes'] / GB:.2f} GB above the loaded weights; "
                         f"full maps would be {12 * 12 * T * T * 4 / GB:.1f} GB"))
    else:
        t.append(_target("lazy_capture peak memory over the model's own (fused) at T=4096", "≤ 1 GB", None, None,
                         "not measured (T=4096 not in this run)"))
    lz = next((x for x in out["lazy"] if x["model"] == model and x["T"] == T), None)
    for key, name, limit in (("overview_s", "pooled 512×512 overview of one head at T=4096", 1.0),
                             ("rollout_s", "one query's rollout at T=4096", 10.0)):
        if lz is not None:
            t.append(_target(name, f"≤ {limit:g} s", round(lz[key], 3), lz[key] <= limit))
        else:
            t.append(_target(name, f"≤ {limit:g} s", None, None, "not measured (T=4096 not in this run)"))
    B = Payload.BYTES
    sized = [p for p in out.get(Top.PAYLOAD, []) if p.get(B) is not None]
    if sized:
        over = sorted((p for p in sized if p[B] > TARGETS["payload_bytes"]), key=lambda p: -p[B])
        worst = over[0] if over else max(sized, key=lambda p: p[B])
        note = ("over: " + ", ".join(f"{Payload.label(p)} T={p[Payload.T]} ({p[B] / 1e6:.1f} MB"
                                      + (", extrapolated" if p.get(Payload.ESTIMATED) else "") + ")" for p in over)
                if over else f"largest: {Payload.label(worst)} at T={worst[Payload.T]}")
        t.append(_target("every page's Plotly payload at every T", "≤ 2 MB", round(worst[B] / 1e6, 3),
                         not over, note))
    return t + smollm2_targets(out) + view_targets(out)


def smollm2_targets(out: dict) -> list[dict]:
    """SmolLM2 (30 layers × 9 heads): its first charts in chromium within 1.5× lecture-decoder's; lazy capture
    within 1.05× the fused forward at T = 128 and 512, when the run measured smollm2."""
    from attnlab.bench.smollm2_charts import smollm2_chart_targets  # the browser's part of issue 32

    if SMOLLM2 not in out.get(Top.MODELS, {}):
        return smollm2_chart_targets(out)
    limit, t = TARGETS["smollm2_lazy_over_fused"], smollm2_chart_targets(out)
    for T in (128, 512):
        lazy, fused = _row(out, SMOLLM2, T, "lazy_capture"), _row(out, SMOLLM2, T, "fused")
        ratio, name = paired_ratio(lazy, fused), f"smollm2 lazy_capture / fused at T={T}"
        if ratio is None:
            t.append(_target(name, f"≤ {limit}", None, None, "not measured"))
            continue
        cpu = paired_ratio({"times_s": lazy.get(Result.CPU_TIMES)}, {"times_s": fused.get(Result.CPU_TIMES)})
        t.append(_target(name, f"≤ {limit}", round(ratio, 3), ratio <= limit,
                         f"median of {len(lazy['times_s'])} per-round ratios; medians {lazy['time_s']:.2f} s vs "
                         f"{fused['time_s']:.2f} s" + ("" if cpu is None else f"; CPU-time ratio {cpu:.3f}")))
    return t
