"""A class at once (`attnlab bench --class`, and its quick form in the tests): N browser sessions in one
chromium use one server for D seconds, loopback only.

Each session types its own text (a student's name, so its tokens are recognisable), goes to Heatmaps, picks
another layer (server) and another head (the chart's own buttons), goes back to Explore, about every
STEP_S seconds. After each step it must show its own text's tokens (the head matrix's tick labels or the
Explore token strip) with Streamlit idle. Counted: errors (an exception element, an error box, an uncaught JS
error, a step that never showed its tokens) and mixed results (a chart or strip showing another session's
text); timed: the step → own result shown, polled round-robin over every waiting session; sampled: the
server's resident memory every few seconds, whose slope after the first third (warm-up) is reported.
"""

from __future__ import annotations

import html
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from attnlab.analysis.machinery.bench_report import ClassLoad
from attnlab.bench.chromium import IDLE, errors_on, launch, new_page, playwright_or
from attnlab.bench.server import streamlit_server
from attnlab.bench.widgets import chart_button

MODEL = "random-decoder"  # characters as tokens: every name shows in the ticks
NAMES = ["Ada", "Bo", "Cyd", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Liv", "Max", "Ned", "Ola",
         "Pia", "Quin", "Rex", "Sol", "Tia", "Uma", "Vic", "Wes", "Xia", "Yul", "Zed"]
STEP_S = 3.0  # a session acts about this often
SETTLE_S = 120.0  # a step not showing its own tokens by then is an error
STRIP_JS = """() => { const s = document.querySelector('.strip'); if (!s) return null;
  return [...s.querySelectorAll('.tok')].map(e => { const t = [...e.childNodes].filter(n => n.nodeName !== 'SUB')
    .map(n => n.textContent).join(''); return e.classList.contains('unk') ? t.replace(/^✖/, '') : t; }); }"""
TICKS_JS = """() => [...document.querySelectorAll('.st-key-fig-head .xtick text')].map(e => e.textContent)"""
TITLE_JS = """() => { const el = document.querySelector('.st-key-fig-head .js-plotly-plot');
  return el && el.layout && el.layout.title ? el.layout.title.text : null; }"""
_TOKENIZER: dict = {}


def tokens_of(text: str) -> list[str]:
    if MODEL not in _TOKENIZER:
        from attnlab.model.registry import load

        _TOKENIZER[MODEL] = load(MODEL)
    return _TOKENIZER[MODEL].encode(text).tokens


def head_ticks(tokens: list[str]) -> list[str]:
    """The head matrix's x tick labels for these tokens, as the browser shows them: fitted to the column
    Heatmaps draws it in (pages/heatmaps.py), which thins a long axis."""
    from attnlab.app.columns import column_px
    from attnlab.app.figures.fit import fit_width
    from attnlab.app.figures.switcher import head_switcher, switch_layers

    tokens_of("a")  # loads the model
    cfg, n = _TOKENIZER[MODEL].model.cfg, len(tokens)
    stack = np.zeros((cfg.n_layers, cfg.n_heads, n, n))  # [L, H, q, k]: the page's head 0.0 with its buttons
    layers = switch_layers(cfg.n_layers, cfg.n_heads, n, n, 0)
    fig = head_switcher(stack, tokens, tokens, 0, 0, layers or [0])
    fit_width(fig, column_px([3, 2], False, "medium")[0])
    return [html.unescape(t) for t in fig.layout.xaxis.ticktext]


def name_of(i: int) -> str:
    """Session i's student name (unique: "Ada", …, "Zed", "Ada1", …)."""
    return NAMES[i % len(NAMES)] + (str(i // len(NAMES)) if i >= len(NAMES) else "")


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process and its children, MB (/proc)."""
    total = 0
    for p in [pid] + _children(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return round(total / 1e6, 1) if total else None


def _children(pid: int) -> list[int]:
    try:
        kids = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [g for k in kids for g in _children(k)]


class Session:
    """One student: a browser context with its own text."""

    def __init__(self, browser, url: str, i: int):
        self.i, self.url = i, url
        self.name = name_of(i)
        self.ctx, self.page = new_page(browser, timeout_ms=int(SETTLE_S * 1000))
        self.where, self.round, self.t0, self.title = "explore", 0, 0.0, None
        self.text = self.new_text()

    def new_text(self) -> str:
        return f"{self.name} r{self.round} sees {self.name}"

    def want(self) -> list[str]:
        toks = tokens_of(self.text)
        return head_ticks(toks) if self.where == "heatmaps" else toks

    def shown(self):
        return self.page.evaluate(TICKS_JS if self.where == "heatmaps" else STRIP_JS)

    def open(self) -> None:
        q = self.text.replace(" ", "%20")
        self.page.goto(f"{self.url}/?model={MODEL}&text={q}", wait_until="commit")
        self.t0 = time.perf_counter()

    def act(self) -> str:
        """Fire the next step without waiting; return its name."""
        p, step = self.page, self.round % 4
        self.round += 1
        self.t0 = time.perf_counter()
        if step == 0:
            self.text = self.new_text()
            box = p.get_by_role("textbox", name="Text")
            box.fill(self.text)
            box.press("Control+Enter")
            return "text"
        if step == 1:
            p.get_by_role("link", name="Heatmaps").click()
            self.where = "heatmaps"
            return "page"
        if step == 2:
            b = p.locator(".st-key-layer button").nth(self.round % 2)
            self.title = f"layer {b.inner_text().strip()}, head"  # the head matrix's title once redrawn
            b.click()
            return "layer"
        chart_button(p, "head", "head", self.round % 2)  # in the browser: no server round trip
        p.get_by_role("link", name="Explore").click()
        self.where, self.title = "explore", None
        return "head+page"

    def settled(self) -> bool:
        p = self.page
        if not p.query_selector(IDLE):
            return False
        try:
            title_ok = self.title is None or self.title in (p.evaluate(TITLE_JS) or "")  # drawn in <b>…</b>
            return title_ok and self.shown() == self.want()
        except Exception:  # noqa: BLE001 — mid-rerun: not yet
            return False


def run_class(sessions: int, seconds: float, url: str | None = None, server_pid: int | None = None,
              progress: Callable[[str], None] | None = None, browser=None) -> dict:
    """The load test; starts its own server unless `url` (and `server_pid` for its memory) are given, and its
    own chromium unless `browser` is."""
    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory(prefix="attnlab-class-") as tmp, playwright_or(browser) as p:
        b = browser or launch(p)
        try:
            if url is None:
                with streamlit_server(Path(tmp) / "server.log") as srv:
                    return _run(b, sessions, seconds, srv["url"], srv["pid"], say)
            return _run(b, sessions, seconds, url, server_pid, say)
        finally:
            if b is not browser:
                b.close()


def _run(browser, n: int, seconds: float, url: str, pid: int | None, say) -> dict:
    load0 = [round(x, 2) for x in os.getloadavg()]
    rss, stop = [], threading.Event()
    t_start = time.perf_counter()

    def sample():
        while not stop.is_set():
            if pid is not None and (m := rss_mb(pid)) is not None:
                rss.append([round(time.perf_counter() - t_start, 1), m])
            stop.wait(5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ss = [Session(browser, url, i) for i in range(n)]
    latencies, errors, notes, steps, mixed = [], [], [], 0, [0]

    def settle(waiting: list[Session], timed: bool) -> None:
        """Poll every waiting session in turn until each shows its own result (or SETTLE_S passes)."""
        deadline = time.perf_counter() + SETTLE_S
        while waiting and time.perf_counter() < deadline:
            for s in list(waiting):
                if s.settled():
                    if timed:
                        latencies.append(time.perf_counter() - s.t0)
                    errors.extend(f"{s.name}: {e[:200]}" for e in errors_on(s.page))
                    s.page.errors.clear()
                    waiting.remove(s)
                    continue
                shown = _safe(s.shown)
                other = next((o for o in ss if o is not s and shown and shown == _want_as(s, o)), None)
                if other is not None:
                    mixed[0] += 1
                    notes.append(f"{s.name} showed {other.name}'s tokens")
                    waiting.remove(s)
            time.sleep(0.05)
        errors.extend(f"{s.name}: step {s.round} on {s.where} never showed its own tokens" for s in waiting)

    try:
        for s in ss:
            s.open()
        settle(list(ss), timed=False)  # warm-up: every session open on its own text
        say(f"{n} sessions open after {time.perf_counter() - t_start:.0f} s; errors {len(errors)}")
        t_act = time.perf_counter()
        while time.perf_counter() - t_act < seconds:
            round_t0 = time.perf_counter()
            for s in ss:  # fire every session's step first, so the server serves them at once
                s.act()
                steps += 1
            settle(list(ss), timed=True)
            say(f"{n} sessions: {steps} steps, errors {len(errors)}, mixed {mixed[0]}, "
                f"RSS {rss[-1][1] if rss else '?'} MB")
            time.sleep(max(0.0, STEP_S - (time.perf_counter() - round_t0)))
    finally:
        stop.set()
        for s in ss:
            s.ctx.close()
    wall = time.perf_counter() - t_start
    return {ClassLoad.SESSIONS: n, ClassLoad.SECONDS: round(wall, 1), ClassLoad.STEPS: steps,
            ClassLoad.ERRORS: len(errors), ClassLoad.MIXED: mixed[0],
            ClassLoad.P50: round(statistics.median(latencies), 3) if latencies else None,
            ClassLoad.P95: round(float(np.percentile(latencies, 95)), 3) if latencies else None,
            ClassLoad.RSS: rss, ClassLoad.RSS_SLOPE: rss_slope(rss),
            ClassLoad.LOAD: [load0, [round(x, 2) for x in os.getloadavg()]],
            ClassLoad.NOTES: (errors + notes)[:50], ClassLoad.ACTIVE: round(time.perf_counter() - t_act, 1)}


def rss_slope(rss: list) -> float | None:
    """MB per minute of the server's memory after warm-up (the first third of the samples dropped)."""
    pts = rss[len(rss) // 3:]
    if len(pts) < 3:
        return None
    t, m = np.array(pts, dtype=np.float64).T
    return round(float(np.polyfit(t / 60, m, 1)[0]), 2)


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None


def _want_as(s: Session, other: Session) -> list[str]:
    toks = tokens_of(other.text)
    return head_ticks(toks) if s.where == "heatmaps" else toks


def _other(s: Session, ss: list[Session], shown) -> str:
    return next((o.name for o in ss if o is not s and shown == _want_as(s, o)), "?")
