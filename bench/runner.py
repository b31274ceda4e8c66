"""`attnlab bench`: forward time and peak memory per mode, lazy-capture costs, targets, tables.

Each (model, T) is timed in one fresh process with its modes interleaved round by round (a busy
machine then slows every mode alike, so the ratios hold); each (model, T, mode)'s peak memory is
measured in a process of its own. Modes whose maps would not fit the memory budget are skipped and
say why. Everything lands in one JSON-ready dict with the machine it ran on.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from analysis.bench.worker import OOM_EXIT, OUR_MODES, RESULT_PREFIX

SCHEMA = "attnlab-bench/1"
MODES = ("fused", "lazy_capture", "eager_capture", "hf_eager_attentions", "hf_sdpa")
LENGTHS = (128, 512, 1024, 2048, 4096)
QUICK_LENGTHS = (128, 1024)
GPT2_SMALL = dict(vocab_size=50257, n_positions=4096, n_embd=768, n_layer=12, n_head=12)
BUNDLED = "lecture-decoder"
GB = 1e9  # decimal, as in "9.7 GB of maps"
TARGETS = {
    "lazy_over_fused_T1024": 1.15,
    "lazy_peak_over_fused_T4096_bytes": 1 * GB,
    "overview_T4096_s": 1.0,
    "rollout_T4096_s": 10.0,
    "payload_bytes": 2_000_000,
}


# -- machine ----------------------------------------------------------------------------------------------------
def machine_info() -> dict:
    import numpy
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "memory_total_bytes": _meminfo("MemTotal"),
        "memory_available_bytes": _meminfo("MemAvailable"), "cuda": torch.cuda.is_available(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": list(os.getloadavg()),
    }


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# -- models -----------------------------------------------------------------------------------------------------
def save_gpt2_weights(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """A GPT-2-small-shaped transformers model (or `config`) with seeded random weights (n_positions
    4096), saved once as safetensors (lm_head is tied to wte and left out) for every job to load."""
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**(config or GPT2_SMALL)))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    path = folder / "gpt2-small-random.safetensors"
    save_file(state, str(path))
    return path


def model_specs(names, folder: Path, lengths) -> tuple[list[dict], list[dict]]:
    """(specs to run, notes on models skipped)."""
    specs, skipped = [], []
    for name in names:
        if name == "gpt2-small":
            from transformers import GPT2Config

            from model.hf.convert import gpt2_config

            cfg = gpt2_config(GPT2Config(**GPT2_SMALL).to_dict())
            specs.append({"name": name, "source": "gpt2", "hf_config": GPT2_SMALL, "weights": None,
                          "cfg": _shape(cfg), "modes": list(MODES), "lengths": list(lengths),
                          "about": "GPT-2-small shape, seeded random weights (transformers init), n_positions 4096; "
                                   "our model converted from it by model.hf.convert"})
            continue
        from model.registry import bundled_names, load

        if name not in bundled_names():
            skipped.append({"name": name, "note": f"{name} is not bundled yet (model/lecture/checkpoints/)"})
            continue
        cfg = load(name).cfg
        fits = [t for t in lengths if t <= cfg.max_len]
        note = None
        if len(fits) < len(lengths):
            note = (f"context {cfg.max_len}: T > {cfg.max_len} does not fit"
                    + ("" if fits else f"; measured at T = {cfg.max_len} instead"))
            fits = fits or [cfg.max_len]
        specs.append({"name": name, "source": "registry", "cfg": _shape(cfg), "modes": list(OUR_MODES),
                      "lengths": fits, "note": note,
                      "about": f"bundled decoder ({cfg.positional} positions); hf_* modes need a GPT-2 architecture"})
    return specs, skipped


def _shape(cfg) -> dict:
    return {"layers": cfg.n_layers, "heads": cfg.n_heads, "d_model": cfg.d_model, "d_head": cfg.d_head,
            "vocab": cfg.vocab_size, "context": cfg.max_len, "positional": cfg.positional}


def predicted_bytes(cfg: dict, mode: str, T: int) -> int:
    """A rough upper estimate of a mode's peak above the loaded model, to skip what cannot fit."""
    L, H, D, V = cfg["layers"], cfg["heads"], cfg["d_model"], cfg["vocab"]
    base = 2 * T * V * 4 + 24 * T * D * 4  # logits (+ a copy) and one layer's activations
    maps, layer = L * H * T * T * 4, 3 * H * T * T * 4
    return {
        "fused": base, "hf_sdpa": base + T * T * 4,
        "lazy_capture": base + L * 3 * T * D * 4 + T * T,
        "eager_capture": base + 2 * maps + layer,  # scores and pattern kept per site
        "hf_eager_attentions": base + maps + layer,
    }[mode]


# -- jobs -------------------------------------------------------------------------------------------------------
def run_job(spec: dict, timeout_s: float = 7200) -> dict:
    """Run one worker job in a fresh Python; {'error': ...} when it fails or passes its memory limit."""
    cmd = [sys.executable, "-m", "analysis.bench.worker", json.dumps(spec)]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=root, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    wall = time.perf_counter() - t
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            out = json.loads(line[len(RESULT_PREFIX):])
            out["job_wall_s"] = wall
            return out
    if p.returncode == OOM_EXIT:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "memory limit"}
    tail = " ".join((p.stderr or p.stdout).strip().splitlines()[-3:])[-600:]
    return {"error": f"exit {p.returncode}: {tail}"}


def run_benchmark(quick: bool = False, lengths=None, models=("gpt2-small", BUNDLED), repeats: int = 5,
                  warmup: int = 1, max_mem_gb: float | None = None, modes=MODES, extras: bool = True,
                  hook_T: int = 128, progress: Callable[[str], None] | None = None) -> dict:
    """Every measurement of the issue in one dict (see docs/benchmarks.md for the fields)."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be ≥ 1 and warmup ≥ 0")
    say = progress or (lambda msg: None)
    lengths = tuple(lengths or (QUICK_LENGTHS if quick else LENGTHS))
    machine = machine_info()
    avail = machine["memory_available_bytes"] or 8 * 2**30
    budget = int(max_mem_gb * GB) if max_mem_gb else int(0.5 * avail)
    out = {"schema": SCHEMA, "quick": quick, "machine": machine,
           "settings": {"lengths": list(lengths), "repeats": repeats, "warmup": warmup, "modes": list(modes),
                        "memory_budget_bytes": budget, "timing": "one process per (model, T), modes interleaved "
                        "round by round; median of `repeats` rounds after `warmup`",
                        "memory": "one process per (model, T, mode): peak resident set (VmHWM) during one "
                        "forward with its output held, minus the resident set with the model loaded"},
           "models": {}, "results": [], "lazy": [], "hooks": None, "hook_overhead_ratio": None, "payload": [],
           "skipped_models": []}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp:
        specs, out["skipped_models"] = model_specs(models, Path(tmp), lengths)
        for s in specs:
            if s["source"] == "gpt2":
                say("saving the GPT-2-small-shaped random weights")
                s["weights"] = str(save_gpt2_weights(Path(tmp)))
            out["models"][s["name"]] = {k: s[k] for k in ("cfg", "about", "lengths", "modes")} | (
                {"note": s["note"]} if s.get("note") else {})
        for s in specs:
            base = {k: s[k] for k in ("name", "source", "hf_config", "weights") if k in s}
            for T in s["lengths"]:
                want = [m for m in modes if m in s["modes"]]
                fits = [m for m in want if predicted_bytes(s["cfg"], m, T) <= budget]
                rows = {m: {"model": s["name"], "T": T, "mode": m} for m in want}
                for m in set(want) - set(fits):
                    rows[m]["skipped"] = (f"needs ~{predicted_bytes(s['cfg'], m, T) / GB:.1f} GB above the model, "
                                          f"over the memory budget {budget / GB:.1f} GB")
                if fits:
                    say(f"{s['name']} T={T}: timing {', '.join(fits)}")
                    res = run_job({**base, "job": "time", "T": T, "modes": fits, "repeats": repeats,
                                   "warmup": warmup})
                    for m in fits:
                        if "error" in res:
                            rows[m]["error"] = res["error"]
                        else:
                            rows[m]["time_s"] = res["time_s"][m]
                            rows[m]["times_s"] = res["times_s"][m]
                for m in fits:
                    say(f"{s['name']} T={T}: peak memory of {m}")
                    mem = run_job({**base, "job": "memory", "T": T, "mode": m, "repeats": repeats,
                                   "warmup": warmup, "extras": extras and m == "lazy_capture",
                                   "limit_bytes": budget + 4 * 2**30})
                    if "error" in mem:
                        rows[m]["memory_error"] = mem["error"]
                        continue
                    extra = mem.pop("extras", None)
                    rows[m].update({k: v for k, v in mem.items() if k != "job_wall_s"})
                    if extra is not None:
                        out["lazy"].append({"model": s["name"], "T": T, **extra})
                out["results"].extend(rows[m] for m in want)
            if s is specs[0]:  # gpt2-small when it runs
                say(f"{s['name']}: hook points off vs patched out (T={hook_T})")
                hk = run_job({**base, "job": "hooks", "T": min(hook_T, s["cfg"]["context"]),
                              "repeats": max(repeats, 21), "warmup": warmup})
                out["hooks"] = {"model": s["name"], "T": min(hook_T, s["cfg"]["context"]), **hk}
                out["hook_overhead_ratio"] = hk.get("ratio")
    out["machine"]["loadavg_end"] = list(os.getloadavg())
    out["wall_s"] = time.perf_counter() - t_start
    out["targets"] = evaluate_targets(out)
    return out


# -- targets ----------------------------------------------------------------------------------------------------
def _row(out: dict, model: str, T: int, mode: str) -> dict:
    for r in out["results"]:
        if (r["model"], r["T"], r["mode"]) == (model, T, mode):
            return r
    return {}


def _target(name: str, target: str, measured, passed, note: str = "") -> dict:
    return {"name": name, "target": target, "measured": measured, "passed": passed, "note": note}


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
    sized = [p for p in out.get("payload", []) if p.get("bytes") is not None]
    if sized:
        over = sorted((p for p in sized if p["bytes"] > TARGETS["payload_bytes"]), key=lambda p: -p["bytes"])
        worst = over[0] if over else max(sized, key=lambda p: p["bytes"])
        note = ("over: " + ", ".join(f"{p['page']} T={p['T']} ({p['bytes'] / 1e6:.1f} MB"
                                      + (", extrapolated" if p.get("estimated") else "") + ")" for p in over)
                if over else f"largest: {worst['page']} at T={worst['T']}")
        t.append(_target("every page's Plotly payload at every T", "≤ 2 MB", round(worst["bytes"] / 1e6, 3),
                         not over, note))
    return t


# -- tables -----------------------------------------------------------------------------------------------------
def _fmt(v, unit: str = "s") -> str:
    if v is None:
        return "—"
    if unit == "s":
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    if unit == "GB":
        return f"{v / GB:.2f}"
    if unit == "MB":
        return f"{v / 1e6:.2f}"
    return f"{v:.2f}"


def _cell(row: dict, key: str, unit: str = "s") -> str:
    if not row:
        return "n/a"
    if "skipped" in row:
        return "skipped"
    if key in row:
        return _fmt(row[key], unit)
    return "error" if ("error" in row or "memory_error" in row) else "—"


def markdown(out: dict) -> str:
    """The results as markdown tables (what `attnlab bench` prints and docs/benchmarks.md keeps)."""
    m = out["machine"]
    lines = [f"Machine: {m['cpu']}, {m['usable_cores']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
             f"transformers {m['transformers']}, {m['date']}; load average {m['loadavg_start'][0]:.1f} at the start, "
             f"{m.get('loadavg_end', [float('nan')])[0]:.1f} at the end. Medians of {out['settings']['repeats']} "
             f"after {out['settings']['warmup']} warm-up.", ""]
    for name, info in out["models"].items():
        c = info["cfg"]
        lines += [f"### {name}: {c['layers']} layers × {c['heads']} heads, d_model {c['d_model']}, vocab {c['vocab']}, "
                  f"context {c['context']}", "", info["about"] + (f". {info['note']}" if info.get("note") else ""), ""]
        modes = [x for x in MODES if x in info["modes"]]
        hdr = "| T | " + " | ".join(modes) + " | lazy/fused | eager/hf_eager |"
        lines += ["Forward time, seconds (median; ratios: median of the per-round ratios):", "", hdr,
                  "|" + "---|" * (len(modes) + 3)]
        for T in info["lengths"]:
            rows = {x: _row(out, name, T, x) for x in modes}
            lz, fu = rows.get("lazy_capture", {}), rows.get("fused", {})
            ea, he = rows.get("eager_capture", {}), rows.get("hf_eager_attentions", {})
            r1, r2 = (_fmt(paired_ratio(a, b), "x") for a, b in ((lz, fu), (ea, he)))
            lines.append(f"| {T} | " + " | ".join(_cell(rows[x], "time_s") for x in modes) + f" | {r1} | {r2} |")
        lines += ["", "Peak memory above the loaded model, GB (one forward, output held):", "",
                  "| T | " + " | ".join(modes) + " | lazy − fused |", "|" + "---|" * (len(modes) + 2)]
        for T in info["lengths"]:
            rows = {x: _row(out, name, T, x) for x in modes}
            lz, fu = rows.get("lazy_capture", {}), rows.get("fused", {})
            d = (f"{(lz['peak_rss_bytes'] - fu['peak_rss_bytes']) / GB:.2f}"
                 if "peak_rss_bytes" in lz and "peak_rss_bytes" in fu else "—")
            lines.append(f"| {T} | " + " | ".join(_cell(rows[x], "peak_above_baseline_bytes", "GB") for x in modes)
                         + f" | {d} |")
        lazy = [x for x in out["lazy"] if x["model"] == name]
        if lazy:
            lines += ["", "From a lazy capture (seconds; middle layer, middle head; rollout of the last query):", "",
                      "| T | one head's pattern (record) | same, torch blocks | pooled 512² overview | "
                      "rollout of one query | q/k kept, GB | held by records, GB |", "|---|---|---|---|---|---|---|"]
            for x in lazy:
                lines.append(f"| {x['T']} | {_fmt(x['head_pattern_s'])} | {_fmt(x['head_pattern_blocks_s'])} | "
                             f"{_fmt(x['overview_s'])} | {_fmt(x['rollout_s'])} | {_fmt(x['lazy_bytes'], 'GB')} | "
                             f"{_fmt(x['lazy_resident_bytes'], 'GB')} |")
        skipped = [r for r in out["results"] if r["model"] == name and ("skipped" in r or "error" in r
                                                                          or "memory_error" in r)]
        if skipped:
            lines += [""] + [f"- T={r['T']} {r['mode']}: " + (r.get("skipped") or r.get("error") or r["memory_error"])
                             for r in skipped]
        lines.append("")
    for s in out.get("skipped_models", []):
        lines += [f"- {s['name']}: {s['note']}", ""]
    hk = out.get("hooks")
    if hk and "ratio" in hk:
        lines += [f"Hook points when off: fused forward at T={hk['T']} ({hk['model']}) {hk['off_s']:.4f} s with the "
                  f"ContextVar check vs {hk['patched_s']:.4f} s with `hooks.active` patched to `lambda: None`: "
                  f"hook_overhead_ratio = {hk['ratio']:.3f} (median of {len(hk['off_times_s'])} paired ratios; "
                  f"ratio of the medians {hk['ratio_of_medians']:.3f}). Directly: `hooks.active()` costs "
                  f"{hk['active_call_ns']:.0f} ns against {hk['lambda_call_ns']:.0f} ns for `lambda: None`, called once "
                  f"per site ({hk['sites']} sites), i.e. a ratio of {hk['implied_ratio']:.7f}.", ""]
    if out.get("payload"):
        pages = sorted({p["page"] for p in out["payload"]})
        Ts = sorted({p["T"] for p in out["payload"]})
        lines += ["Plotly payload per page, MB (`len(plotly.io.to_json(fig))` summed over the page's figures):", "",
                  "| page | " + " | ".join(f"T={T}" for T in Ts) + " |", "|" + "---|" * (len(Ts) + 1)]
        for pg in pages:
            cells = []
            for T in Ts:
                p = next((p for p in out["payload"] if p["page"] == pg and p["T"] == T), None)
                cells.append(_fmt(p["bytes"], "MB") if p else "—")
            lines.append(f"| {pg} | " + " | ".join(cells) + " |")
        if out.get("payload_note"):
            lines += ["", out["payload_note"]]
        lines.append("")
    lines += ["Targets:", "", "| target | limit | measured | result | note |", "|---|---|---|---|---|"]
    for t in out.get("targets", []):
        res = {True: "PASS", False: "MISS", None: "not measured"}[t["passed"]]
        lines.append(f"| {t['name']} | {t['target']} | {t['measured'] if t['measured'] is not None else '—'} | "
                     f"{res} | {t['note']} |")
    return "\n".join(lines) + "\n"
