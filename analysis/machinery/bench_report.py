"""The `attnlab bench` JSON (docs/benchmarks.json): its schema id and key names, and its one reader.

bench/ writes exactly these keys (it imports them from here); the Backends page reads the file through
`read_benchmarks`, which accepts exactly this schema and returns None for anything else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

SCHEMA = "attnlab-bench/1"
DEFAULT_PATH = "docs/benchmarks.json"


class Top:
    """Keys of the top-level object."""

    SCHEMA = "schema"
    QUICK = "quick"
    MACHINE = "machine"
    SETTINGS = "settings"
    MODELS = "models"
    RESULTS = "results"
    LAZY = "lazy"
    HOOKS = "hooks"
    HOOK_OVERHEAD = "hook_overhead_ratio"
    PAYLOAD = "payload"
    PAYLOAD_NOTE = "payload_note"
    SKIPPED_MODELS = "skipped_models"
    WALL = "wall_s"
    TARGETS = "targets"
    REGENERATE = "regenerate"
    BROWSER = "browser"  # `attnlab bench --browser` (Browser keys); `--class` adds CLASS (ClassLoad keys)
    CLASS = "class_load"
    CLASS_WS = "class_load_ws"  # `--class --clients ws`: a list of ClassLoad runs, one per (sessions, replicas)
    BROWSER_BASELINE = "browser_baseline"  # an earlier --browser run kept for comparison, with its "commit"
    REAL_SIZE = "real_size"  # `attnlab bench --real-size`: {shape: {attnlab, transformers, pages}} (bench.real_size)
    HOSTILE = "class_hostile"  # `attnlab bench --class --hostile`: a list of runs, one per session count (bench.hostile)
    COSTS = "costs"  # `attnlab bench --costs`: the warm start and faithfulness ratios (bench.costs)
    # the sections measured by a command of their own and merged into the file: a plain run keeps them
    MERGED = (BROWSER, CLASS, CLASS_WS, BROWSER_BASELINE, REAL_SIZE, HOSTILE, COSTS)


class Result:
    """Keys of one `results` row: one (model, T, mode)."""

    MODEL = "model"
    T = "T"
    MODE = "mode"
    TIME = "time_s"  # median seconds of one forward
    TIMES = "times_s"  # every timed round
    CPU_TIMES = "cpu_times_s"  # the process CPU seconds of every timed round (all threads)
    BASELINE = "baseline_rss_bytes"
    PEAK_RSS = "peak_rss_bytes"
    PEAK = "peak_above_baseline_bytes"
    PEAK_MB = "peak_mb"  # PEAK in MiB, rounded to 0.1
    METHOD = "method"
    SKIPPED = "skipped"  # why the mode did not run (memory budget)
    ERROR = "error"  # the timing job failed
    MEMORY_ERROR = "memory_error"  # the memory job failed


class Payload:
    """Keys of one `payload` row: what one page sends for one T."""

    PAGE = "page"
    T = "T"
    BYTES = "bytes"  # the Plotly JSON of every chart plus image bytes; None when the page failed
    FIGURES = "figures"  # the Plotly JSON size of each chart, in page order
    IMAGES = "images"  # the bytes of each st.image the page sends
    MODEL = "model"
    BUILD_S = "build_s"  # seconds the page took to run (and build its figures)
    ESTIMATED = "estimated"
    NOTE = "note"
    ERROR = "error"
    AGAIN_WITH = ("smollm2",)  # models the pages are measured again with (rows named "page (model)")

    @staticmethod
    def label(row: dict) -> str:
        """The row's page, with its model when it is one of AGAIN_WITH."""
        model = row.get(Payload.MODEL)
        return row[Payload.PAGE] + (f" ({model})" if model in Payload.AGAIN_WITH else "")


class Target:
    """Keys of one `targets` row."""

    NAME = "name"
    TARGET = "target"
    MEASURED = "measured"
    PASSED = "passed"  # True, False or None (not measured)
    NOTE = "note"


class Browser:
    """Keys of the `browser` section: {ROWS: [one (page, case)], REPEATS, QUICK, WALL, MACHINE}."""

    ROWS = "rows"
    REPEATS = "repeats"
    QUICK = "quick"
    WALL = "wall_s"
    MACHINE = "machine"
    PAGE = "page"
    CASE = "case"  # the model and text, in words
    QUERY = "query"  # the URL query the page was opened with
    COLD = "cold_first_chart_s"  # fresh server: navigation → first chart painted
    WARM = "warm_first_chart_s"  # warm server, fresh browser context: median
    WARM_TIMES = "warm_times_s"
    WIDGETS = "widgets"  # widget name → {MEDIAN, TIMES} or {ERROR} or {NOTE}
    MEDIAN = "median_s"
    TIMES = "times_s"  # every change; the first (warming the caches) is not in the median
    LOAD_START = "loadavg_start"
    LOAD_END = "loadavg_end"
    ERRORS = "errors"
    ERROR = "error"
    NOTE = "note"
    FLOOR = "floor"  # bench/floor_page.py (one small Plotly chart alone): {WARM, WARM_TIMES}; None in quick mode
    FLOOR_PLAIN = "floor_plain"  # the same page with one line of text instead: Streamlit's own start, no chart
    NAVIGATION = "navigation"  # bench/navigation.py: [{PAGE (title), FIRST_VISIT, REVISIT, SHOWN, ERRORS}]
    NAV_QUERY = "navigation_query"  # the query the walk opened the app with
    NAV_MACHINE = "navigation_machine"  # bench/machine.py's record of a walk measured alone (--navigation)
    FIRST_VISIT = "first_visit_s"  # sidebar click → the page's first chart, first visit in the session
    REVISIT = "revisit_s"  # the same on the second walk through the sidebar
    SHOWN = "shown"  # "chart", or "plain" for a page drawn without a chart
    SMOLLM2 = "smollm2_first_chart"  # bench/smollm2_charts.py: {ROWS, REPEATS, LOAD_START, LOAD_END}
    RATIO = "ratio"  # smollm2's first chart / lecture-decoder's: median of per-round ratios
    TOKENS = "tokens"  # the preset's text, in the model's tokens


class ClassLoad:
    """Keys of the `class_load` section (`attnlab bench --class`)."""

    SESSIONS = "sessions"
    SECONDS = "seconds"  # wall time, opening included
    ACTIVE = "active_s"  # seconds of steps after every session opened
    STEPS = "steps"
    ERRORS = "errors"
    MIXED = "mixed"
    P50 = "p50_s"  # widget → own chart shown, seconds
    P95 = "p95_s"
    RSS = "rss_mb"  # [[seconds since start, server RSS in MB], ...]
    RSS_SLOPE = "rss_slope_mb_per_min"  # after warm-up (the first third)
    LOAD = "loadavg"  # at the start and at the end
    NOTES = "notes"
    MACHINE = "machine"
    BY_STEP = "by_step"  # websocket clients: {step: {"n", "p50_s", "p95_s"}}
    REPLICAS = "replicas"  # websocket clients: {replica named by nginx's header (or "-"): sessions}
    CLIENTS = "clients"  # "browser" (chromium contexts) or "ws" (Streamlit websocket clients)
    N_REPLICAS = "n_replicas"  # websocket clients: server processes behind nginx (1: one server, no nginx)


MIB = 2**20


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _length(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


def _row(r) -> dict | None:
    """A results row as the Backends page plots it, or None when it has neither time nor memory.
    Raises ValueError when the row is not what bench writes."""
    if not (isinstance(r, dict) and isinstance(r.get(Result.MODEL), str) and isinstance(r.get(Result.MODE), str)
            and _length(r.get(Result.T))):
        raise ValueError("a results row without model, mode and T")
    t, peak = r.get(Result.TIME), r.get(Result.PEAK)
    if (t is not None and not _number(t)) or (peak is not None and not _number(peak)):
        raise ValueError("a results row with a time or peak that is not a number")
    if t is None and peak is None:
        return None
    model, mode = r[Result.MODEL], r[Result.MODE]
    return {"model": model, "mode": mode, "T": r[Result.T], "median_s": None if t is None else float(t),
            "peak_mb": None if peak is None else peak / MIB, "series": f"{model} · {mode}"}


def _payload(p) -> dict:
    if not (isinstance(p, dict) and isinstance(p.get(Payload.PAGE), str) and _length(p.get(Payload.T))
            and Payload.BYTES in p and (p[Payload.BYTES] is None or _number(p[Payload.BYTES]))):
        raise ValueError("a payload row without page, T and bytes")
    return dict(p)


def read_browser(path: str | Path) -> dict | None:
    """The `browser` and `class_load` sections of the JSON at `path` ({"browser": …, "class_load": …}, either
    may be None), or None when the file is missing, not JSON, not this schema, or has neither section."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get(Top.SCHEMA) != SCHEMA:
        return None
    b, c = data.get(Top.BROWSER), data.get(Top.CLASS)
    b = b if isinstance(b, dict) and isinstance(b.get(Browser.ROWS), list) and all(
        isinstance(r, dict) and isinstance(r.get(Browser.PAGE), str) and isinstance(r.get(Browser.WIDGETS), dict)
        for r in b[Browser.ROWS]) else None
    c = c if isinstance(c, dict) and _length(c.get(ClassLoad.SESSIONS)) else None
    return None if b is None and c is None else {Top.BROWSER: b, Top.CLASS: c}


def read_benchmarks(path: str | Path) -> dict | None:
    """The `attnlab bench` JSON at `path` as {"path", "schema", "machine", "rows", "payload", "targets"}:
    rows of {model, mode, T, median_s, peak_mb, series} (results that have a time or a peak; seconds and
    MiB above the loaded model), payload and targets rows as written. None when the file is missing,
    unreadable, not JSON, or not this schema."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None
    if not isinstance(data, dict) or data.get(Top.SCHEMA) != SCHEMA:
        return None
    results, payload = data.get(Top.RESULTS), data.get(Top.PAYLOAD, [])
    targets, machine = data.get(Top.TARGETS, []), data.get(Top.MACHINE)
    if not (isinstance(results, list) and isinstance(payload, list) and isinstance(targets, list)
            and isinstance(machine, dict)):
        return None
    try:
        rows = [r for r in map(_row, results) if r is not None]
        pay = [_payload(x) for x in payload]
    except ValueError:
        return None
    if not all(isinstance(t, dict) and isinstance(t.get(Target.NAME), str) for t in targets):
        return None
    return {"path": str(p), "schema": SCHEMA, "machine": machine, "rows": rows, "payload": pay,
            "targets": [dict(t) for t in targets]}
