"""The Lecture tour in the browser bench: the warm first chart of /tour?step=1, then Next through every step on
one page, twice — the first walk is each step's first visit on this server (its model runs), the second walk
(a new session on the same server) finds every step cached. Each Next is timed from the click to the chart
showing the next step's data, the app idle and two frames painted (bench.browser.timed_change)."""

from __future__ import annotations

from attnlab.analysis.machinery.bench_report import Browser
from attnlab.bench.chromium import (
    errors_on,
    load_avg,
    median,
    new_page,
    timed_change,
    wait_chart,
    warm_first_chart,
)

CHART = "tour"  # the tour's one chart (frame.chart key)


def walk(page, n_steps: int) -> list[float]:
    """Seconds of each Next from step 1 to step n_steps."""
    return [timed_change(page, CHART, lambda: page.get_by_role("button", name="Next").click())
            for _ in range(n_steps - 1)]


def measure_tour(browser, url: str, page_name: str, query: str, widgets, repeats: int, cold_s: float | None,
                 progress) -> dict:
    """A browser-bench row for the tour (measure_page's signature): warm first chart, and every Next twice."""
    from attnlab.app.tour import STEPS

    row = {Browser.PAGE: page_name, Browser.QUERY: query, Browser.COLD: cold_s, Browser.LOAD_START: load_avg(),
           Browser.WIDGETS: {}, Browser.ERRORS: []}
    warm_first_chart(browser, f"{url}/tour?step=1", CHART, repeats, row)
    progress(f"tour: warm first chart {row[Browser.WARM]} s")
    for name in ("next step, first visit", "next step, cached"):
        ctx, page = new_page(browser)
        try:
            page.goto(f"{url}/tour?step=1", wait_until="commit")
            wait_chart(page, CHART)
            times = walk(page, len(STEPS))
            row[Browser.WIDGETS][name] = {Browser.MEDIAN: median(times), Browser.TIMES: [round(x, 4) for x in times]}
            progress(f"tour: {name} → chart {median(times)} s (slowest {max(times):.2f} s)")
            row[Browser.ERRORS] += errors_on(page)
        except Exception as e:  # noqa: BLE001 — recorded; the other walk still runs
            row[Browser.WIDGETS][name] = {Browser.ERROR: f"{type(e).__name__}: {str(e)[:300]}"}
        finally:
            ctx.close()
    row[Browser.LOAD_END] = load_avg()
    return row
