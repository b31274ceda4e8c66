"""`attnlab bench`: forward time and peak memory per mode, and lazy-capture costs.

Each (model, T) is timed in one fresh process with its modes interleaved round by round (a busy
machine then slows every mode alike, so the ratios hold); each (model, T, mode)'s peak memory is
measured in a process of its own (bench.worker). Modes whose maps would not fit the memory budget are
skipped and say why. Everything lands in one JSON-ready dict (the schema of analysis.machinery.bench_report) with the
machine it ran on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attnlab.analysis.machinery.bench_report import MIB, SCHEMA, Result, Top
from attnlab.bench import specs as S
from attnlab.bench.machine import machine_info
from attnlab.bench.meter import OOM_EXIT
from attnlab.bench.targets import evaluate_targets
from attnlab.bench.worker import RESULT_PREFIX


def run_job(spec: dict, timeout_s: float = 7200) -> dict:
    """Run one worker job in a fresh Python; {'error': ...} when it fails or passes its memory limit."""
    cmd = [sys.executable, "-m", "attnlab.bench.worker", json.dumps(spec)]
    import attnlab

    home = str(Path(attnlab.__file__).resolve().parents[1])  # where this attnlab is imported from, for the child
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")]))}
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
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


def run_benchmark(quick: bool = False, lengths=None, models=("gpt2-small", S.BUNDLED), repeats: int = 5,
                  warmup: int = 1, max_mem_gb: float | None = None, modes=S.MODES, extras: bool = True,
                  hook_T: int = 128, progress: Callable[[str], None] | None = None) -> dict:
    """Every measurement of the issue in one dict (see docs/benchmarks.md for the fields)."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be ≥ 1 and warmup ≥ 0")
    say = progress or (lambda msg: None)
    lengths = tuple(lengths or (S.QUICK_LENGTHS if quick else S.LENGTHS))
    machine = machine_info()
    avail = machine["memory_available_bytes"] or 8 * 2**30
    budget = int(max_mem_gb * S.GB) if max_mem_gb else int(0.5 * avail)
    out = {Top.SCHEMA: SCHEMA, Top.QUICK: quick, Top.MACHINE: machine,
           Top.SETTINGS: {"lengths": list(lengths), "repeats": repeats, "warmup": warmup, "modes": list(modes),
                          "memory_budget_bytes": budget, "timing": "one process per (model, T), modes interleaved "
                          "round by round; median of `repeats` rounds after `warmup`",
                          "memory": "one process per (model, T, mode): peak resident set (VmHWM) during one "
                          "forward with its output held, minus the resident set with the model loaded"},
           Top.MODELS: {}, Top.RESULTS: [], Top.LAZY: [], Top.HOOKS: None, Top.HOOK_OVERHEAD: None,
           Top.PAYLOAD: [], Top.SKIPPED_MODELS: []}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp:
        specs, out[Top.SKIPPED_MODELS] = S.model_specs(models, Path(tmp), lengths)
        for s in specs:
            if s["source"] == "gpt2":
                say("saving the GPT-2-small-shaped random weights")
                s["weights"] = str(S.save_gpt2_weights(Path(tmp)))
            out[Top.MODELS][s["name"]] = {k: s[k] for k in ("cfg", "about", "lengths", "modes")} | (
                {"note": s["note"]} if s.get("note") else {})
        for s in specs:
            base = {k: s[k] for k in ("name", "source", "hf_config", "weights") if k in s}
            for T in s["lengths"]:
                want = [m for m in modes if m in s["modes"]]
                fits = [m for m in want if S.predicted_bytes(s["cfg"], m, T) <= budget]
                rows = {m: {Result.MODEL: s["name"], Result.T: T, Result.MODE: m} for m in want}
                for m in set(want) - set(fits):
                    need = S.predicted_bytes(s["cfg"], m, T) / S.GB
                    rows[m][Result.SKIPPED] = (f"needs ~{need:.1f} GB above the model, "
                                               f"over the memory budget {budget / S.GB:.1f} GB")
                if fits:
                    say(f"{s['name']} T={T}: timing {', '.join(fits)}")
                    res = run_job({**base, "job": "time", "T": T, "modes": fits, "repeats": repeats,
                                   "warmup": warmup})
                    for m in fits:
                        if "error" in res:
                            rows[m][Result.ERROR] = res["error"]
                        else:
                            rows[m][Result.TIME] = res["time_s"][m]
                            rows[m][Result.TIMES] = res["times_s"][m]
                            rows[m][Result.CPU_TIMES] = res["cpu_times_s"][m]
                for m in fits:
                    say(f"{s['name']} T={T}: peak memory of {m}")
                    mem = run_job({**base, "job": "memory", "T": T, "mode": m, "repeats": repeats,
                                   "warmup": warmup, "extras": extras and m == "lazy_capture",
                                   "limit_bytes": budget + 4 * 2**30})
                    if "error" in mem:
                        rows[m][Result.MEMORY_ERROR] = mem["error"]
                        continue
                    extra = mem.pop("extras", None)
                    rows[m].update({k: v for k, v in mem.items() if k != "job_wall_s"})
                    rows[m][Result.PEAK_MB] = round(rows[m][Result.PEAK] / MIB, 1)  # the Backends page's MiB
                    if extra is not None:
                        out[Top.LAZY].append({"model": s["name"], "T": T, **extra})
                out[Top.RESULTS].extend(rows[m] for m in want)
            if s is specs[0]:  # gpt2-small when it runs
                say(f"{s['name']}: hook points off vs patched out (T={hook_T})")
                hk = run_job({**base, "job": "hooks", "T": min(hook_T, s["cfg"]["context"]),
                              "repeats": max(repeats, 21), "warmup": warmup})
                out[Top.HOOKS] = {"model": s["name"], "T": min(hook_T, s["cfg"]["context"]), **hk}
                out[Top.HOOK_OVERHEAD] = hk.get("ratio")
    out[Top.MACHINE]["loadavg_end"] = list(os.getloadavg())
    out[Top.WALL] = time.perf_counter() - t_start
    out[Top.TARGETS] = evaluate_targets(out)
    return out
