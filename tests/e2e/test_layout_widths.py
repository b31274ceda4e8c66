"""Readable at a distance (issue 31), in Debian's chromium at 1400 and 1024 px: on Score scales, Heads and Routing
every table shows all its columns (none scrolled off to the right); every head-type pill on Heads is whole; on
Routing no two tick labels of an axis overlap, the legend keeps off the plot and no label sits on the bars."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from bench.browser import IDLE
from tests.e2e.conftest import EXC

# each table's grid: the width of its columns vs the width it is shown in (glide-data-grid's scroller)
TABLES_JS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')].map(d => {
  const s = d.querySelector('.dvn-scroller');
  return s ? {content: s.scrollWidth, shown: s.clientWidth} : null; })"""
# each pill of a multiselect: its box inside the widget's box, its text not cut short
PILLS_JS = """key => { const box = document.querySelector(`.st-key-${key} .react-aria-ComboBox [role="group"]`);
  const outer = box.getBoundingClientRect();
  return [...box.querySelectorAll('[data-tag]')].map(t => { const r = t.getBoundingClientRect(),
    text = t.querySelector('[title]');
    return {name: t.getAttribute('aria-label'), inside: r.left >= outer.left - 0.5 && r.right <= outer.right + 0.5,
            whole: text.scrollWidth <= text.clientWidth}; }); }"""


# one chart's boxes (page px): tick labels per axis, its legend, its plot area, its annotations and its bars
BOXES_JS = """key => { const el = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const all = sel => [...el.querySelectorAll(sel)].map(box);
  return {x: all('.xtick text'), y: all('.ytick text'), legend: all('.legend .bg'), plot: all('.draglayer .nsewdrag'),
          notes: all('.annotation'), bars: all('.barlayer .point path')}; }"""


def overlap(a, b, slack: float = 0.5) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


@contextmanager
def open_at(browser, url: str, width: int):
    """The page at `url` in a `width`-pixel window, drawn; on leaving, no exception shown and no script error."""
    ctx = browser.new_context(viewport={"width": width, "height": 1100})
    ctx.set_default_timeout(120_000)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector('[data-testid="stDataFrame"] .dvn-scroller', timeout=120_000)
    page.wait_for_selector(IDLE, state="attached", timeout=120_000)
    page.wait_for_timeout(500)  # the grids size their columns once drawn
    try:
        yield page
        assert page.locator(EXC).count() == 0 and page.errors == []
    finally:
        ctx.close()


def tables_whole(page, count: int) -> None:
    """`count` tables, each drawn (grids draw one by one, below the fold last) and showing all its columns."""
    page.wait_for_function(f"() => ({TABLES_JS})().filter(t => t).length >= {count}", timeout=120_000)
    page.wait_for_timeout(300)  # the last grid sizes its columns once drawn
    tables = page.evaluate(TABLES_JS)
    assert None not in tables and all(t["content"] <= t["shown"] + 1 for t in tables), tables
    assert len(tables) == count, tables


@pytest.mark.parametrize("width", [1400, 1024])
def test_score_scales_tables_show_every_column(st_app, browser, width):
    with open_at(browser, f"{st_app['url']}/scores?model=lecture-decoder", width) as page:
        tables_whole(page, 3)  # scores per head, the softmax per head, q·kᵀ → the scaled score


@pytest.mark.parametrize("width", [1400, 1024])
def test_heads_tables_and_type_pills_are_whole(st_app, browser, width):
    with open_at(browser, f"{st_app['url']}/heads?model=lecture-decoder", width) as page:
        tables_whole(page, 4)  # two halves of the head statistics, then the two prediction tables
        pills = page.evaluate(PILLS_JS, "labels")
        assert len(pills) >= 3 and all(p["inside"] and p["whole"] for p in pills), pills


@pytest.mark.parametrize("width", [1400, 1024])
def test_routing_tables_whole_and_labels_apart(st_app, browser, width):
    with open_at(browser, f"{st_app['url']}/routing", width) as page:
        tables_whole(page, 3)  # the router's choices, the two predictions
        for key in ("rt-load", "rt-entropy"):
            page.locator(f".st-key-fig-{key}").scroll_into_view_if_needed()
            b = page.evaluate(BOXES_JS, key)
            for axis in ("x", "y"):
                ticks = b[axis]
                assert len(ticks) >= 2 and not [(i, j) for i in range(len(ticks)) for j in range(i + 1, len(ticks))
                                                if overlap(ticks[i], ticks[j])], (key, axis, ticks)
            assert b["legend"] and b["plot"] and not overlap(b["legend"][0], b["plot"][0]), (key, b)
            assert not [n for n in b["notes"] for bar in b["bars"] if overlap(n, bar)], (key, b["notes"])
