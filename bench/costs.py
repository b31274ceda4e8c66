"""`attnlab bench --costs`: two ratios a class server answers for, measured in one run.

* warm start: Explore's first chart in chromium (navigation → its chart painted) on a fresh server started as
  `attnlab app` starts it (the warm start of app/warm.py done), over the same on that server once warm (median of
  `repeats` fresh browser contexts); a fresh server without the warm start is measured beside it, for scale.
* faithfulness: `attnlab faithfulness --model lecture-decoder --n N` with every method over the same command
  without integrated gradients (`--methods` lists the others), each a fresh process: without, with, without (the
  mean of the two), so a load that drifts during the run weighs on both sides.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Top

COSTS = Top.COSTS  # the section's key in the benchmark JSON
CHART = "explore-rows"  # Explore's first chart (pages/explore.py)
FAITH_MODEL, FAITH_N = "lecture-decoder", 100


def _first_chart(browser, url: str) -> float:
    from attnlab.bench.browser import new_page, wait_chart

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
    from attnlab.bench.browser import launch, playwright_or
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


def faithfulness_cost(n: int = FAITH_N, model: str = FAITH_MODEL,
                      progress: Callable[[str], None] | None = None) -> dict:
    """{n, model, with_ig_s, without_ig_s (the mean of a run before and one after), ratio = with / without}: wall
    seconds of the commands."""
    from attnlab.analysis.faithfulness.benchmark import METHODS

    say = progress or (lambda msg: None)
    others = ",".join(m for m in METHODS if m != "integrated_gradients")
    out, times = {"n": n, "model": model}, {"without": [], "with": []}
    for key in ("without", "with", "without"):  # the load drifts: the run with it between two without it
        extra = ["--methods", others] if key == "without" else []
        cmd = [sys.executable, "-m", "attnlab.cli", "faithfulness", "--model", model, "--n", str(n), "--json", *extra]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
        times[key].append(round(time.perf_counter() - t0, 2))
        say(f"faithfulness --n {n} {key} integrated gradients: {times[key][-1]} s")
    out["with_ig_s"], out["without_ig_s"] = times["with"][0], round(statistics.mean(times["without"]), 2)
    out["without_ig_times"] = times["without"]
    out["ratio"] = round(out["with_ig_s"] / out["without_ig_s"], 3)
    out["command"] = f"attnlab faithfulness --model {model} --n {n} [--methods {others}]"
    return out


def measure_costs(repeats: int = 5, n: int = FAITH_N, progress: Callable[[str], None] | None = None) -> dict:
    """The `costs` section: both measurements, the load average around them."""
    load0 = list(os.getloadavg())
    out = {"warm_start": warm_start(repeats, progress), "faithfulness": faithfulness_cost(n, progress=progress)}
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
            f"| `attnlab faithfulness --model {f['model']} --n {f['n']}`, every method | {f['with_ig_s']:.1f} | "
            f"without integrated gradients (`--methods`; mean of a run before and one after) | "
            f"{f['without_ig_s']:.1f} | {f['ratio']:.2f}× |", ""]
