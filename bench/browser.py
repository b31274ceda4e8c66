"""`attnlab bench --browser`: what a lecturer waits for in Debian's chromium, on a server of its own.

* cold first chart: a fresh server, a fresh browser context, navigation → the first chart painted;
* warm first chart: the same, each time in a fresh context, on the already warm server;
* widget → repainted chart: one change of a widget (layer, head, query token, preset, matrix kind, backend, the
  chart's own head/layer buttons) → Streamlit idle again and the watched chart's visible data changed, plus two
  animation frames. "Changed" compares a hash of the visible traces' data (`gd.data`) before and after.
* in-app navigation (bench/navigation.py): a sidebar click → the page's first chart, every page of the
  navigation, first visit and revisit, in one session on a warm server.

Medians of `repeats` (the first change of each widget warms its caches and is not counted), with the load
average before and after each measurement. Playwright drives /usr/bin/chromium (`executable_path`), never a
downloaded browser.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Browser
from attnlab.bench.chromium import (
    IDLE,
    MENU_JS,
    errors_on,
    frames,
    launch,
    load_avg,
    median,
    new_page,
    playwright_or,
    timed_change,
    wait_chart,
    warm_first_chart,
)
from attnlab.bench.navigation import NAV_QUERY, run_navigation
from attnlab.bench.server import streamlit_server
from attnlab.bench.smollm2_charts import smollm2_first_charts
from attnlab.bench.tour import measure_tour
from attnlab.bench.widgets import CASE_PAGES, CASES, PAGES, QUICK, WIDGETS, Widget


def measure_page(browser, url: str, page_name: str, query: str, widgets, repeats: int, cold_s: float | None,
                 progress) -> dict:
    """Warm first chart (fresh contexts) and each widget's change → repaint on one page."""
    path, first, charts = PAGES[page_name]
    row = {Browser.PAGE: page_name, Browser.QUERY: query, Browser.COLD: cold_s, Browser.LOAD_START: load_avg(),
           Browser.WIDGETS: {}, Browser.ERRORS: []}
    warm_first_chart(browser, f"{url}/{path}?{query}", first, repeats, row)
    progress(f"{page_name}: warm first chart {row[Browser.WARM]} s")
    ctx, page = new_page(browser)
    try:
        page.goto(f"{url}/{path}?{query}", wait_until="commit")
        wait_chart(page, first)
        for name in widgets:
            w = WIDGETS[name]
            w = Widget(w.name, charts[name], w.act)  # watched on this page's chart
            try:
                wait_chart(page, w.chart or first)
                menu = name.removeprefix("chart ")  # "chart layer": the chart's "layer i" buttons
                if name.startswith("chart") and not page.evaluate(MENU_JS, [w.chart, menu]):
                    row[Browser.WIDGETS][name] = {Browser.NOTE: f"the chart has no {menu} buttons at this size"}
                    continue
                w.act(page, 1, w.chart)  # from here on, value 0, 1, 0, … each differs from the one shown
                page.wait_for_timeout(500)
                wait_chart(page, w.chart or first)
                times = [timed_change(page, w.chart, lambda i=i, w=w: w.act(page, i, w.chart)) for i in range(repeats + 1)]
                row[Browser.WIDGETS][name] = {Browser.MEDIAN: median(times[1:]),
                                              Browser.TIMES: [round(x, 4) for x in times]}
                progress(f"{page_name}: {name} → repaint {row[Browser.WIDGETS][name][Browser.MEDIAN]} s")
            except Exception as e:  # noqa: BLE001 — recorded; one widget failing does not end the run
                row[Browser.WIDGETS][name] = {Browser.ERROR: f"{type(e).__name__}: {str(e)[:300]}"}
                row[Browser.ERRORS].append(f"{name}: {type(e).__name__}")
        row[Browser.ERRORS] += errors_on(page)
    finally:
        ctx.close()
    row[Browser.LOAD_END] = load_avg()
    return row


def floor_first_chart(browser, log: Path, repeats: int, plain: bool = False) -> dict:
    """Warm first chart of bench/floor_page.py (one 20×20 Plotly heatmap; `plain`: its line of text instead),
    measured as measure_page measures a page: {WARM: median, WARM_TIMES}."""
    times = []
    with streamlit_server(log, entry=Path(__file__).with_name("floor_page.py")) as srv:
        for _ in range(repeats + 1):  # the first visit warms the server's caches: not counted
            ctx, page = new_page(browser)
            t0 = time.perf_counter()
            page.goto(srv["url"] + ("/?plain=1" if plain else ""), wait_until="commit")
            if plain:
                page.wait_for_selector(".st-key-fig-floor [data-testid='stMarkdownContainer']", state="visible")
                page.wait_for_selector(IDLE, state="attached")
                frames(page)
            else:
                wait_chart(page, "floor")
            times.append(time.perf_counter() - t0)
            ctx.close()
    return {Browser.WARM: median(times[1:]), Browser.WARM_TIMES: [round(x, 4) for x in times]}


def cold_first_chart(p, page_name: str, query: str, log: Path) -> float:
    """A fresh server and browser: navigation → the first chart painted (the server start not counted)."""
    path, first, _ = PAGES[page_name]
    with streamlit_server(log) as srv:
        browser = launch(p)
        try:
            ctx, page = new_page(browser)
            t0 = time.perf_counter()
            page.goto(f"{srv['url']}/{path}?{query}", wait_until="commit")
            wait_chart(page, first)
            dt = time.perf_counter() - t0
            ctx.close()
        finally:
            browser.close()
    return dt


def run_smollm2(p, log: Path, repeats: int, progress) -> dict:
    """bench/smollm2_charts.py on a server and browser of its own ({ERROR} when it fails: the run goes on)."""

    try:
        with streamlit_server(log) as srv:
            b = launch(p)
            try:
                return smollm2_first_charts(b, srv["url"], repeats, progress)
            finally:
                b.close()
    except Exception as e:  # noqa: BLE001 — recorded in the section
        progress(f"smollm2 first charts failed: {type(e).__name__}: {str(e)[:300]}")
        return {Browser.ERROR: f"{type(e).__name__}: {str(e)[:300]}"}


def run_browser(quick: bool = False, repeats: int = 5, progress: Callable[[str], None] | None = None,
                browser=None) -> dict:
    """The browser section of the benchmark JSON: one row per (page, case). `browser`: an open chromium to use
    for the warm measurements (the cold ones always launch their own; quick mode has none)."""
    if browser is not None and not quick:
        raise ValueError("cold first charts launch their own browser: pass `browser` in quick mode only")

    say = progress or (lambda msg: None)
    rows, t0 = [], time.perf_counter()
    pages = [QUICK[0]] if quick else list(PAGES)
    cases = CASES[:1] if quick else CASES
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-browser-") as tmp, playwright_or(browser) as p:
        for page_name in pages:
            for label, query in cases:
                if page_name not in CASE_PAGES.get(label, PAGES):
                    continue
                try:
                    cold = None if quick else round(cold_first_chart(p, page_name, query, Path(tmp) / "cold.log"), 4)
                    say(f"{page_name} ({label}): cold first chart {cold} s")
                    with streamlit_server(Path(tmp) / "warm.log") as srv:
                        b = browser or launch(p)
                        try:
                            widgets = QUICK[1] if quick else list(PAGES[page_name][2])
                            measure = measure_tour if page_name == "tour" else measure_page
                            row = measure(b, srv["url"], page_name, query, widgets, repeats, cold, say)
                        finally:
                            if b is not browser:
                                b.close()
                except Exception as e:  # noqa: BLE001 — recorded in the row: the other cases still run
                    say(f"{page_name} ({label}): failed: {type(e).__name__}: {str(e)[:300]}")
                    row = {Browser.PAGE: page_name, Browser.QUERY: query, Browser.WIDGETS: {},
                           Browser.ERRORS: [f"{type(e).__name__}: {str(e)[:300]}"], Browser.LOAD_END: load_avg()}
                row[Browser.CASE] = label
                rows.append(row)

        nav = run_navigation(p, Path(tmp) / "nav.log", quick, say, browser)
        floor = plain = smol = None
        if not quick:
            smol = run_smollm2(p, Path(tmp) / "smol.log", repeats, say)
            b = launch(p)
            try:
                floor = floor_first_chart(b, Path(tmp) / "floor.log", repeats)
                say(f"floor (one Plotly chart): warm first chart {floor[Browser.WARM]} s")
                plain = floor_first_chart(b, Path(tmp) / "plain.log", repeats, plain=True)
                say(f"floor (one line of text): warm first paint {plain[Browser.WARM]} s")
            finally:
                b.close()
    return {Browser.ROWS: rows, Browser.REPEATS: repeats, Browser.QUICK: quick, Browser.FLOOR: floor,
            Browser.FLOOR_PLAIN: plain, Browser.NAVIGATION: nav, Browser.SMOLLM2: smol,
            Browser.NAV_QUERY: NAV_QUERY,
            Browser.WALL: round(time.perf_counter() - t0, 1)}
