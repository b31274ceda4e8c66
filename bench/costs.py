"""`attnlab bench --costs`: two ratios a class server answers for, measured in one run.

* warm start: Explore's first chart in chromium (navigation → its chart painted) on a fresh server started as
  `attnlab app` starts it (the warm start of app/warm.py done), over the same on that server once warm (median of
  `repeats` fresh browser contexts); a fresh server without the warm start is measured beside it, for scale.
* faithfulness: `attnlab faithfulness --model lecture-decoder --n N` with every method over the same command
  without integrated gradients (`--methods` lists the others), each a fresh process, `rounds` of each alternating
  (without, with; then with, without; …) so a load that drifts during the run weighs on both sides: the ratio of
  the median wall seconds, and of the median CPU seconds (user + sys, the load of the shared machine counts less
  there); integrated gradients' gradient rows per example from the report.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from attnlab.analysis.machinery.bench_report import Top

COSTS = Top.COSTS  # the section's key in the benchmark JSON
CHART = "explore-rows"  # Explore's first chart (pages/explore.py)
FAITH_MODEL, FAITH_N, FAITH_ROUNDS = "lecture-decoder", 100, 3


def _first_chart(browser, url: str) -> float:
    from attnlab.bench.chromium import new_page, wait_chart

    ctx, page = new_page(browser)
    try:
        t0 = time.perf_counter()
        page.goto(f"{url}/", wait_until="commit")
        wait_chart(page, CHART)
        return time.perf_counter() - t0
    finally:
        ctx.close()


def _wait_warm(log: Path, timeout: float = 600) -> float:
    """Seconds until the server's log says its warm start is done."""
    from attnlab.app.warm import DONE

    t0 = time.perf_counter()
    while DONE not in log.read_text(errors="replace"):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"no warm start in {timeout:.0f} s")
        time.sleep(0.2)
    return time.perf_counter() - t0


def warm_start(repeats: int = 5, progress: Callable[[str], None] | None = None) -> dict:
    """{fresh_warmed_s, warm_s, warm_times, cold_s, warm_up_s, ratio}: ratio = fresh_warmed_s / warm_s."""
    from attnlab.bench.chromium import launch, playwright_or
    from attnlab.bench.server import streamlit_server

    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-costs-") as tmp, playwright_or(None) as p:
        b = launch(p)
        try:
            with streamlit_server(Path(tmp) / "cold.log") as srv:
                cold = _first_chart(b, srv["url"])
            say(f"warm start: fresh server without it, first chart {cold:.2f} s")
            log = Path(tmp) / "warm.log"
            with streamlit_server(log, warm=True) as srv:
                warm_up = _wait_warm(log)
                fresh = _first_chart(b, srv["url"])
                times = [_first_chart(b, srv["url"]) for _ in range(repeats)]
        finally:
            b.close()
    warm = statistics.median(times)
    say(f"warm start: fresh server, first chart {fresh:.2f} s after a {warm_up:.1f} s warm-up; warm {warm:.2f} s")
    return {"fresh_warmed_s": round(fresh, 4), "warm_s": round(warm, 4), "warm_times": [round(t, 4) for t in times],
            "cold_s": round(cold, 4), "warm_up_s": round(warm_up, 2), "ratio": round(fresh / warm, 3)}


def _run(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child (user + sys), its stdout) of one command."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), done.stdout


def faithfulness_cost(n: int = FAITH_N, model: str = FAITH_MODEL, rounds: int = FAITH_ROUNDS,
                      progress: Callable[[str], None] | None = None) -> dict:
    """{n, model, rounds, with_ig_s, without_ig_s (medians of the wall seconds), ratio = with / without, with_ig_cpu_s,
    without_ig_cpu_s, cpu_ratio (the same of CPU seconds), every run's times, ig_rows (mean gradient rows an example),
    ig_max_rows, ig_max_error, threads (OMP_NUM_THREADS as the commands saw it), loadavg [start, end]}."""
    from attnlab.analysis.faithfulness.benchmark import METHODS

    say = progress or (lambda msg: None)
    others = ",".join(m for m in METHODS if m != "integrated_gradients")
    load0 = os.getloadavg()[0]
    wall, cpu, report = {"without": [], "with": []}, {"without": [], "with": []}, None
    for r in range(rounds):
        for key in ("without", "with") if r % 2 == 0 else ("with", "without"):  # the load drifts: alternate
            extra = ["--methods", others] if key == "without" else []
            w, c, stdout = _run([sys.executable, "-m", "attnlab.cli", "faithfulness", "--model", model, "--n", str(n),
                                 "--json", *extra])
            wall[key].append(round(w, 2))
            cpu[key].append(round(c, 2))
            report = json.loads(stdout) if key == "with" else report
            say(f"faithfulness --n {n} {key} integrated gradients: {wall[key][-1]} s ({cpu[key][-1]} s CPU)")
    ig = report["integrated_gradients"]
    rows = [e["rows"] for e in ig["examples"] if e.get("rows") is not None]
    med = {k: {"wall": statistics.median(wall[k]), "cpu": statistics.median(cpu[k])} for k in wall}
    return {"n": n, "model": model, "rounds": rounds, "threads": os.environ.get("OMP_NUM_THREADS", "unset"),
            "with_ig_s": med["with"]["wall"], "without_ig_s": med["without"]["wall"],
            "ratio": round(med["with"]["wall"] / med["without"]["wall"], 3),
            "with_ig_cpu_s": med["with"]["cpu"], "without_ig_cpu_s": med["without"]["cpu"],
            "cpu_ratio": round(med["with"]["cpu"] / med["without"]["cpu"], 3),
            "with_ig_times": wall["with"], "without_ig_times": wall["without"],
            "with_ig_cpu_times": cpu["with"], "without_ig_cpu_times": cpu["without"],
            "ig_rows": round(float(np.mean(rows)), 2) if rows else None, "ig_max_rows": max(rows) if rows else None,
            "ig_max_error": ig["max_error"], "loadavg": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "command": f"attnlab faithfulness --model {model} --n {n} [--methods {others}]"}


PARTS = ("warm", "faithfulness")  # `attnlab bench --costs [PART]`: what one run measures


def measure_costs(repeats: int = 5, n: int = FAITH_N, progress: Callable[[str], None] | None = None,
                  parts: tuple[str, ...] = PARTS, previous: dict | None = None) -> dict:
    """The `costs` section: the measurements of `parts` (the rest kept from `previous`), the load average around
    them (the faithfulness runs also keep their own)."""
    load0 = list(os.getloadavg())
    out = dict(previous or {})
    if "warm" in parts:
        out["warm_start"] = warm_start(repeats, progress)
    if "faithfulness" in parts:
        out["faithfulness"] = faithfulness_cost(n, progress=progress)
    if "warm" not in parts and "loadavg_start" in out:
        return out  # the header's load is the warm start's
    return out | {"loadavg_start": [round(x, 2) for x in load0],
                  "loadavg_end": [round(x, 2) for x in os.getloadavg()]}


def costs_markdown(c: dict) -> list[str]:
    """The `costs` section as two lines of text and a table."""
    w, f = c["warm_start"], c["faithfulness"]
    return ["Server costs (`attnlab bench --costs`; load "
            f"{c['loadavg_start'][0]} → {c['loadavg_end'][0]}):", "",
            "| measure | seconds | over | seconds | ratio |", "|---|---|---|---|---|",
            f"| Explore's first chart, fresh `attnlab app` server (warm start done, {w['warm_up_s']} s) | "
            f"{w['fresh_warmed_s']:.2f} | the same, warm server (median of {len(w['warm_times'])}) | "
            f"{w['warm_s']:.2f} | {w['ratio']:.2f}× |",
            f"| the same, fresh server without the warm start (`--no-warm`) | {w['cold_s']:.2f} | warm server | "
            f"{w['warm_s']:.2f} | {w['cold_s'] / w['warm_s']:.2f}× |",
            *faithfulness_rows(f), ""]


def faithfulness_rows(f: dict) -> list[str]:
    """The faithfulness ratio's rows: wall seconds (and, when measured, CPU seconds and IG's rows an example)."""
    cmd = f"`attnlab faithfulness --model {f['model']} --n {f['n']}`, every method"
    if "rounds" not in f:  # a section from before the alternating rounds
        return [f"| {cmd} | {f['with_ig_s']:.1f} | without integrated gradients (`--methods`; mean of a run before and "
                f"one after) | {f['without_ig_s']:.1f} | {f['ratio']:.2f}× |"]
    k = f"median of {f['rounds']}, alternating"
    return [f"| {cmd} ({k}; OMP_NUM_THREADS {f['threads']}; load {f['loadavg'][0]} → {f['loadavg'][1]}) | "
            f"{f['with_ig_s']:.1f} | without integrated gradients (`--methods`; {k}) | {f['without_ig_s']:.1f} | "
            f"{f['ratio']:.2f}× |",
            f"| the same, CPU seconds (user + sys); integrated gradients {f['ig_rows']:.1f} gradient rows an example "
            f"(at most {f['ig_max_rows']}), completeness error ≤ {f['ig_max_error']:.2%} | {f['with_ig_cpu_s']:.1f} | "
            f"without, CPU seconds | {f['without_ig_cpu_s']:.1f} | {f['cpu_ratio']:.2f}× |"]
