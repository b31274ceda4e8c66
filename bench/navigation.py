"""In-app navigation in chromium: a click on a page's link in the sidebar → that page's first chart painted, for
every page of the navigation (app/navigation.py), on the page's first visit in a session and on a revisit.

One browser context opens the app at `/` with the bookmark's query (the model) and walks the sidebar twice, in
navigation order: the first pass is each page's first visit (its numbers computed on the warm server unless an
earlier page computed them), the second the revisit. The clock stops when the page's own title is drawn, the
script run is over and its first chart has pixels (a page without a chart: its run over).
"""

from __future__ import annotations

import time
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Browser
from attnlab.app.navigation import PAGES
from attnlab.bench.chromium import IDLE, errors_on, frames, launch, new_page
from attnlab.bench.server import streamlit_server

NAV_QUERY = "model=lecture-decoder"  # the in-app walk: the bundled decoder on its first preset
NAV_QUICK = ["Heatmaps", "KV cache"]  # quick mode walks these two (and back to Explore)
MAIN = '[data-testid="stMain"]'
# "chart": the first chart of the page titled `title` is painted; "plain": the page is drawn and has no chart
SHOWN_JS = f"""title => {{
  if (!document.querySelector('{IDLE}')) return false;
  const h = document.querySelector('{MAIN} h1');
  if (!h || !h.textContent.trim().endsWith(title)) return false;
  const box = document.querySelector('{MAIN} [data-testid="stPlotlyChart"]');
  if (!box) return 'plain';
  const el = box.querySelector('.js-plotly-plot');
  if (!el || !el._fullLayout || !el.data) return false;
  if (!el.data.some(t => t.type === 'heatmap' || t.type === 'image')) return 'chart';
  return [...el.querySelectorAll('.heatmaplayer image, .imagelayer image')].some(
    im => (im.getAttribute('href') || '').startsWith('data:image/')) ? 'chart' : false; }}"""


# the browser's main thread idle: the page before is drawn to its last chart, not only its first
BROWSER_IDLE_JS = "() => new Promise(r => requestIdleCallback(() => r(true), {timeout: 10000}))"


def click_to_chart(page, title: str, timeout_ms: int = 120_000) -> tuple[float, str]:
    """(seconds from a click on the sidebar link `title` to its page shown, "chart" or "plain"). The clock starts
    with the server idle and the browser idle (what a reader sees is drawn)."""
    link = page.locator('[data-testid="stSidebarNavLink"]').filter(has_text=title).first
    link.scroll_into_view_if_needed()
    page.wait_for_selector(IDLE, state="attached", timeout=timeout_ms)
    page.evaluate(BROWSER_IDLE_JS)
    t0 = time.perf_counter()
    link.click()
    shown = page.wait_for_function(SHOWN_JS, arg=title, timeout=timeout_ms).json_value()
    frames(page)
    return time.perf_counter() - t0, shown


def navigation_times(browser, url: str, query: str, titles: list[str] | None = None, passes: int = 2,
                     progress=None) -> list[dict]:
    """One row per page: {PAGE (title), FIRST_VISIT, REVISIT, SHOWN, ERRORS}, the pages in navigation order
    (`titles`: a subset). The walk starts on Explore and ends on it."""
    say = progress or (lambda msg: None)
    titles = titles or [p[1] for p in PAGES]
    first_title = PAGES[0][1]
    walk = [t for t in titles if t != first_title] + ([first_title] if first_title in titles else [])
    rows = {t: {Browser.PAGE: t, Browser.ERRORS: []} for t in walk}
    ctx, page = new_page(browser)
    try:
        page.goto(f"{url}/?{query}", wait_until="commit")
        page.wait_for_function(SHOWN_JS, arg=first_title, timeout=120_000)
        for n in range(passes):
            key = Browser.FIRST_VISIT if n == 0 else Browser.REVISIT
            for title in walk:
                row = rows[title]
                try:
                    dt, shown = click_to_chart(page, title)
                    row[key], row[Browser.SHOWN] = round(dt, 4), shown
                    say(f"navigation: {title} ({'first visit' if n == 0 else 'revisit'}) {dt:.2f} s")
                except Exception as e:  # noqa: BLE001 — recorded; the walk goes on
                    row[Browser.ERRORS].append(f"{key}: {type(e).__name__}: {str(e)[:200]}")
                row[Browser.ERRORS] += [f"{key}: {m[:200]}" for m in errors_on(page)]
                page.errors.clear()
    finally:
        ctx.close()
    return list(rows.values())


def run_navigation(p, log: Path, quick: bool = False, progress=None, browser=None) -> list[dict]:
    """navigation_times on a fresh server: sidebar click → chart, every page (quick: NAV_QUICK), first visit and
    revisit. `browser`: an open chromium to use, else one is launched and closed."""
    with streamlit_server(log) as srv:
        b = browser or launch(p)
        try:
            return navigation_times(b, srv["url"], NAV_QUERY, NAV_QUICK if quick else None, progress=progress)
        finally:
            if b is not browser:
                b.close()
