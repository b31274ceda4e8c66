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

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Browser
from attnlab.bench.server import streamlit_server
from attnlab.bench.widgets import CASE_PAGES, CASES, PAGES, QUICK, WIDGETS, Widget

CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
EXC = '[data-testid="stException"]'
# a hash of the visible traces of one chart (by its Streamlit key), null while it is not drawn
CHART_HASH_JS = """key => { const el = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  if (!el || !el.data || !el._fullLayout) return null;
  const vis = el.data.filter(t => t.visible !== false).map(t => [t.z, t.source, t.x, t.y]);
  const s = JSON.stringify(vis, (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v)
    + JSON.stringify(el.layout.title || '') + JSON.stringify(el.layout.xaxis && el.layout.xaxis.ticktext || '');
  let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h + ':' + s.length; }"""
PAINTED_JS = """key => { const el = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  if (!el || !el._fullLayout || !el.data) return false;
  if (!el.data.some(t => t.type === 'heatmap' || t.type === 'image')) return true;  // lines, bars: drawn as SVG
  return [...el.querySelectorAll('.heatmaplayer image, .imagelayer image')].some(
    im => (im.getAttribute('href') || '').startsWith('data:image/')); }"""
CHANGED_JS = f"""([key, old]) => {{ if (!document.querySelector('{IDLE}')) return false;
  const h = ({CHART_HASH_JS})(key); return h !== null && h !== old; }}"""
MENU_JS = """([key, menu]) => (document.querySelector(`.st-key-fig-${key} .js-plotly-plot`).layout.updatemenus || [])
  .some(u => (u.buttons || []).some(b => (b.label || '').startsWith(menu + ' ')))"""  # the chart has "menu i" buttons
RERAN_JS = f"""() => window.__ran === true && !!document.querySelector('{IDLE}')"""
WATCH_RUN_JS = """() => { window.__ran = false; const app = document.querySelector('[data-testid="stApp"]');
  const o = new MutationObserver(() => { if (app.getAttribute('data-test-script-state') === 'running') {
    window.__ran = true; o.disconnect(); } }); o.observe(app, {attributes: true}); }"""
FRAMES_JS = "n => new Promise(r => { const f = k => k ? requestAnimationFrame(() => f(k - 1)) : r(); f(n); })"


def chromium_path() -> str | None:
    """Debian's chromium (CHROMIUM_PATH, else the one on PATH), or None."""
    path = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium")
    return path if path and os.access(path, os.X_OK) else None


@contextmanager
def playwright_or(browser):
    """sync_playwright() for a run that launches its own browsers, or nothing when `browser` (an open one, e.g.
    the tests' session browser: a second sync_playwright() cannot start inside it) is given."""
    if browser is not None:
        yield None
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def launch(p):
    """One headless chromium through Playwright `p` (a sync_playwright()), the system build."""
    path = chromium_path()
    if path is None:
        raise RuntimeError("chromium not found (apt-get install chromium, or set CHROMIUM_PATH)")
    return p.chromium.launch(executable_path=path, headless=True, args=CHROME_ARGS, timeout=60_000)


def new_page(browser, timeout_ms: int = 90_000):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    ctx.set_default_timeout(timeout_ms)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return ctx, page


def frames(page, n: int = 2) -> None:
    page.evaluate(FRAMES_JS, n)


def wait_chart(page, key: str, timeout_ms: int = 90_000) -> None:
    """Until the chart `key` has pixels and the script run is over."""
    page.wait_for_selector(f".st-key-fig-{key} .js-plotly-plot", state="attached", timeout=timeout_ms)
    page.locator(f".st-key-fig-{key}").first.scroll_into_view_if_needed()
    page.wait_for_function(PAINTED_JS, arg=key, timeout=timeout_ms)
    page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    frames(page)


def errors_on(page) -> list[str]:
    """Exceptions and error boxes on the page, and uncaught JS errors."""
    out = list(page.errors)
    out += page.locator(EXC).all_inner_texts()
    out += [t for t in page.locator('[data-testid="stAlertContentError"]').all_inner_texts()]
    return out


def hash_of(page, key: str):
    return page.evaluate(CHART_HASH_JS, key)


def timed_change(page, key: str | None, act: Callable[[], None], timeout_ms: int = 90_000) -> float:
    """Seconds from `act()` to the chart `key` showing other data (key None: a script run started and ended),
    the app idle, and two frames painted."""
    page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    old = None if key is None else hash_of(page, key)
    if key is None:
        page.evaluate(WATCH_RUN_JS)
    t0 = time.perf_counter()
    act()
    if key is None:
        page.wait_for_function(RERAN_JS, timeout=timeout_ms)
    else:
        page.wait_for_function(CHANGED_JS, arg=[key, old], timeout=timeout_ms)
    frames(page)
    return time.perf_counter() - t0


def _median(xs):
    return round(statistics.median(xs), 4) if xs else None


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def warm_first_chart(browser, address: str, chart: str, repeats: int, row: dict) -> None:
    """Open `address` in `repeats` fresh contexts, each until `chart` is painted: the row's WARM (median) and
    WARM_TIMES set, the pages' errors added to its ERRORS."""
    warm = []
    for _ in range(repeats):
        ctx, page = new_page(browser)
        t0 = time.perf_counter()
        page.goto(address, wait_until="commit")
        wait_chart(page, chart)
        warm.append(time.perf_counter() - t0)
        row[Browser.ERRORS] += errors_on(page)
        ctx.close()
    row[Browser.WARM], row[Browser.WARM_TIMES] = _median(warm), [round(x, 4) for x in warm]


def measure_page(browser, url: str, page_name: str, query: str, widgets, repeats: int, cold_s: float | None,
                 progress) -> dict:
    """Warm first chart (fresh contexts) and each widget's change → repaint on one page."""
    path, first, charts = PAGES[page_name]
    row = {Browser.PAGE: page_name, Browser.QUERY: query, Browser.COLD: cold_s, Browser.LOAD_START: _load(),
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
                row[Browser.WIDGETS][name] = {Browser.MEDIAN: _median(times[1:]),
                                              Browser.TIMES: [round(x, 4) for x in times]}
                progress(f"{page_name}: {name} → repaint {row[Browser.WIDGETS][name][Browser.MEDIAN]} s")
            except Exception as e:  # noqa: BLE001 — recorded; one widget failing does not end the run
                row[Browser.WIDGETS][name] = {Browser.ERROR: f"{type(e).__name__}: {str(e)[:300]}"}
                row[Browser.ERRORS].append(f"{name}: {type(e).__name__}")
        row[Browser.ERRORS] += errors_on(page)
    finally:
        ctx.close()
    row[Browser.LOAD_END] = _load()
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
    return {Browser.WARM: _median(times[1:]), Browser.WARM_TIMES: [round(x, 4) for x in times]}


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
    from attnlab.bench.smollm2_charts import smollm2_first_charts  # it imports this module's helpers

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
    from attnlab.bench.tour import measure_tour  # it imports this module's helpers

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
                           Browser.ERRORS: [f"{type(e).__name__}: {str(e)[:300]}"], Browser.LOAD_END: _load()}
                row[Browser.CASE] = label
                rows.append(row)
        from attnlab.bench.navigation import NAV_QUERY, run_navigation  # it imports this module's helpers

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
