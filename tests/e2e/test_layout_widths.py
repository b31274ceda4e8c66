"""Readable at a distance (issue 31), in Debian's chromium at 1400 and 1024 px: on Score scales, Heads and Routing
every table shows all its columns (none scrolled off to the right); every head-type pill on Heads is whole; on
Routing no two tick labels of an axis overlap, the legend keeps off the plot and no label sits on the bars. On
Cross-attention and Permutation every chart is whole: its title and tick labels inside the chart, no two tick
labels of an axis overlapping (turned labels measured in their own frame), and no legend or button over the plot,
the axis titles, the tick labels or the title."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from attnlab.bench.chromium import IDLE

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


# one chart's parts (page px) and, per axis, the pairs of tick labels that overlap: each label's box is taken in
# its own (turned) frame, where the labels of an axis are parallel rectangles, so a −60° label is not counted as
# a wide box
PARTS_JS = """el => { const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const all = sel => [...el.querySelectorAll(sel)].filter(e => e.getBoundingClientRect().width > 0).map(box);
  const texts = sel => [...el.querySelectorAll(sel)].filter(t => t.textContent.trim() && t.getBBox().width > 0);
  const clashes = sel => { const ts = texts(sel), info = ts.map(t => ({b: t.getBBox(), m: t.getScreenCTM()})), out = [];
    for (let i = 0; i < ts.length; i++) for (let j = i + 1; j < ts.length; j++) {
      const a = info[i], c = info[j], rel = a.m.inverse().multiply(c.m);
      const p = [new DOMPoint(c.b.x, c.b.y), new DOMPoint(c.b.x + c.b.width, c.b.y + c.b.height)].map(q => q.matrixTransform(rel));
      const [x0, x1, y0, y1] = [Math.min(p[0].x, p[1].x), Math.max(p[0].x, p[1].x), Math.min(p[0].y, p[1].y), Math.max(p[0].y, p[1].y)];
      if (x0 < a.b.x + a.b.width - 0.5 && a.b.x < x1 - 0.5 && y0 < a.b.y + a.b.height - 0.5 && a.b.y < y1 - 0.5)
        out.push([ts[i].textContent, ts[j].textContent]); }
    return out; };
  return {fig: box(el), title: all('.gtitle'), ticks: [...all('.xtick text'), ...all('.ytick text')],
          clash: {x: clashes('.xtick text'), y: clashes('.ytick text')}, axis_titles: [...all('.xtitle'), ...all('.ytitle')],
          plot: all('.draglayer .nsewdrag'), legend: all('.legend .bg'), buttons: all('.updatemenu-button')}; }"""


def charts_drawn(page, count: int) -> None:
    """Wait for `count` Plotly charts, each drawn, and for the last resize to settle."""
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {2 * count}",
                           timeout=120_000)  # each chart draws two svg layers
    page.wait_for_timeout(800)
    assert page.locator(".js-plotly-plot").count() == count


def inside(a, b, slack: float = 1.0) -> bool:
    return a[0] >= b[0] - slack and a[1] >= b[1] - slack and a[2] <= b[2] + slack and a[3] <= b[3] + slack


def charts_whole(page, untitled: tuple[str, ...] = ()) -> dict[str, dict]:
    """Every chart on the page is whole (see the module's docstring), each titled but the `untitled` keys; the
    parts of each chart by key, in the page's order."""
    out = {}
    for el in page.locator(".js-plotly-plot").all():
        key = el.evaluate("e => [...e.closest('[class*=\"st-key-fig-\"]').classList].find(c => c.startsWith('st-key-fig-'))")
        c = el.evaluate(PARTS_JS)
        assert bool(c["title"]) != (key[len("st-key-fig-"):] in untitled), (key, "title", c["title"])
        assert all(inside(t, c["fig"]) for t in c["title"]), (key, "title cut", c["title"], c["fig"])
        assert c["ticks"] and all(inside(t, c["fig"]) for t in c["ticks"]), (key, "tick labels cut", c["fig"])
        assert not c["clash"]["x"] and not c["clash"]["y"], (key, "tick labels overlap", c["clash"])
        over = [(k, o) for k in ("legend", "buttons") for o in c[k] for part in ("plot", "axis_titles", "ticks", "title")
                for p in c[part] if overlap(o, p)]
        assert not over, (key, "legend or buttons over the chart", over, c)
        out[key] = c
    return out


def overlap(a, b, slack: float = 0.5) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


@contextmanager
def open_at(browser, url: str, width: int, ready: str = '[data-testid="stDataFrame"] .dvn-scroller'):
    """The page at `url` in a `width`-pixel window, drawn (`ready` is there); on leaving, no exception shown and no
    script error."""
    ctx = browser.new_context(viewport={"width": width, "height": 1100})
    ctx.set_default_timeout(120_000)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector(ready, timeout=120_000)
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


SIZES = [(1400, 0), (1024, 0), (1024, 1)]  # (window width, presentation mode): the projector's large fonts too


@pytest.mark.parametrize(("width", "present"), SIZES)
def test_cross_attention_charts_whole(st_app, browser, width, present):
    with open_at(browser, f"{st_app['url']}/cross-attention?present={present}", width, ready=".js-plotly-plot") as page:
        charts_drawn(page, 5)
        assert list(charts_whole(page)) == ["st-key-fig-x-mosaic", "st-key-fig-x-cross", "st-key-fig-x-self",
                                            "st-key-fig-x-step", "st-key-fig-x-replay"]
        assert page.locator(".st-key-fig-x-cross .legend").count() == 1  # the alignment's legend is there, apart
        assert page.locator(".st-key-fig-x-replay .updatemenu-button").count() == 2  # ▶ replay and pause


@pytest.mark.parametrize(("width", "present"), SIZES)
def test_permutation_charts_whole_and_panels_alike(st_app, browser, width, present):
    """The three matrices side by side (two a row at 1400 px, one at 1024 px) are the same size, every token
    labelled, under one colour scale; the table shows all its columns."""
    with open_at(browser, f"{st_app['url']}/permutation?present={present}", width) as page:
        tables_whole(page, 2 if present else 1)  # in presentation mode, its large digits: two half tables
        charts_drawn(page, 5)
        charts = charts_whole(page, untitled=("perm-scale",))
        panels = [f"st-key-fig-perm-m{i}" for i in range(3)]
        assert list(charts) == ["st-key-fig-perm-table", "st-key-fig-perm-scale", *panels]
        plots = [charts[k]["plot"][0] for k in panels]
        assert len({(round(p[2] - p[0]), round(p[3] - p[1])) for p in plots}) == 1, plots
        tokens = len("the cat sat on the mat")  # the default text, one byte a token
        for k in panels:  # every token labelled where the labels fit; on a projector every other one
            x, y = (len(page.locator(f".{k} .{a}tick text").all()) for a in "xy")
            assert x == y and (x == tokens if width == 1400 else tokens // 2 <= x <= tokens), (x, y)
        per_row = 2 if width == 1400 else 1
        assert (plots[1][1] == plots[0][1]) == (per_row == 2) and plots[2][1] > plots[0][3]


@pytest.mark.parametrize(("width", "present"), SIZES)
def test_kv_cache_matrices_alike_every_query_labelled(st_app, browser, width, present):
    """The stitched, full and difference matrices of the 64-token default sample: the same size, every query row
    labelled, no two labels of an axis overlapping, every label inside its chart."""
    with open_at(browser, f"{st_app['url']}/kv-cache?present={present}", width) as page:
        charts_drawn(page, 6)
        charts_whole(page)  # the steps, prefix and cost charts as well: every label apart, nothing over the plot
        plots = []
        for key in ("kv-stitched", "kv-full", "kv-diff"):
            c = page.locator(f".st-key-fig-{key} .js-plotly-plot").evaluate(PARTS_JS)
            assert not c["clash"]["x"] and not c["clash"]["y"], (key, c["clash"])
            assert all(inside(t, c["fig"]) for t in c["ticks"]) and all(inside(t, c["fig"]) for t in c["title"]), key
            assert page.locator(f".st-key-fig-{key} .ytick text").count() == 64, key
            plots.append(c["plot"][0])
        assert len({(round(p[2] - p[0]), round(p[3] - p[1])) for p in plots}) == 1, plots
