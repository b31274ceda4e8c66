"""Chromium for the benchmarks, driven by Playwright at Debian's /usr/bin/chromium (`executable_path`, never a
downloaded browser): launching it, a fresh page, waiting for a chart to paint or change, the page's errors."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager

from attnlab.analysis.machinery.bench_report import Browser

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


def median(xs):
    return round(statistics.median(xs), 4) if xs else None


def load_avg() -> list[float]:
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
    row[Browser.WARM], row[Browser.WARM_TIMES] = median(warm), [round(x, 4) for x in warm]
