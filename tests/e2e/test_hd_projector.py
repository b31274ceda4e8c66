"""At 1280×720, the projector's most common window, with and without presentation mode, in Debian's chromium:
the pages whose charts sit in columns draw every chart whole: no two tick labels overlap, no title is cut
(tests/e2e/label_boxes.py), and Backends' grid of max |Δ| keeps a plot (with every number written in it, where the cells hold them)."""

from __future__ import annotations

import urllib.parse

import pytest
from playwright.sync_api import expect

from tests.e2e.label_boxes import troubles
from tests.e2e.test_browser_mech import clean, open_page
from tests.e2e.test_page_labels import drawn

# Backends' grid: its plot area's height and the numbers written in its cells (page px)
GRID_JS = """() => { const el = document.querySelector('.st-key-fig-be-grid .js-plotly-plot');
  const plot = el.querySelector('.draglayer .nsewdrag').getBoundingClientRect();
  return {plot_h: plot.height, rows: el._fullData[0].z.length, cols: el._fullData[0].z[0].length,
          numbers: [...el.querySelectorAll('.heatmaplayer text')].filter(t => /e-\\d/.test(t.textContent)).length}; }"""


@pytest.fixture(params=[False, True], ids=["plain", "presenting"])
def hd_page(request, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    ctx.set_default_timeout(60_000)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.present = request.param
    yield page
    ctx.close()


def visit(page, url: str, path: str, query: dict | None = None) -> None:
    query = (query or {}) | ({"present": "1"} if page.present else {})
    open_page(page, f"{url}/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else ""))
    drawn(page, True)
    clean(page)


def test_backends_grid_keeps_its_plot_and_numbers_at_1280(st_app, hd_page):
    visit(hd_page, st_app["url"], "backends")
    g = hd_page.evaluate(GRID_JS)
    assert g["plot_h"] >= 30 * g["rows"], g  # a row of numbers a row of cells (the plot was 0–2 px tall)
    if not hd_page.present:  # presenting, the figure is fitted to the 1024 px projector, whose cells drop them
        assert g["numbers"] == g["rows"] * g["cols"], g


def test_no_tick_labels_overlap_on_the_column_pages_at_1280(st_app, hd_page):
    """Fitted to 940 px of main column (1400 px) the charts overlapped at 1280 px, where it is 820 px: Heatmaps'
    head (476 px, 4+ pairs), Masks' panels and diff, Score scales' counterfactual; presenting, Backends' three
    matrices fitted to 534 px got 387 px (20 pairs each)."""
    found = {}
    for path in ("heatmaps", "masks", "scores", "backends"):
        visit(hd_page, st_app["url"], path)
        if trouble := troubles(hd_page):
            found[path] = trouble
    assert found == {}


def test_square_matrices_of_a_long_text_keep_their_key_labels_apart_at_1280(st_app, hd_page):
    """A 73-token text: the key axis of a square matrix is as wide as the plot's height, not the column: fitted to
    the column (665 px) Rollout's matrix kept 37 key labels in its 480 px (13 px apart: they overlap)."""
    text = " ".join(["alex has a best friend named mary ."] * 9)  # 72 words and [BOS]
    found = {}
    for path in ("rollout", "heatmaps", "masks"):
        visit(hd_page, st_app["url"], path, {"text": text})
        if trouble := troubles(hd_page):
            found[path] = trouble
    assert found == {}


def test_masks_shows_the_text_both_models_read_as_typed(st_app, page):
    """The caption over the trained models quoted the text inside Markdown: `&amp;` showed as `&`, `**x**` bold,
    `$5 … $6` as maths."""
    text = "alex has **a** best friend &amp; $5 named <b>mary</b> $6 ."
    open_page(page, f"{st_app['url']}/masks?{urllib.parse.urlencode({'text': text})}")
    caption = page.get_by_text("here both read:")
    assert text in caption.inner_text()
    assert caption.locator("strong, b, .katex").count() == 0
    clean(page)

# every Plotly menu of a chart: its drawn box's right edge and the chart's (page px)
MENUS_JS = """key => { const el = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  const right = el.querySelector('.main-svg').getBoundingClientRect().right;
  return [...el.querySelectorAll('.updatemenu-container')].filter(m => m.getBoundingClientRect().width > 0)
    .map(m => ({right: m.getBoundingClientRect().right, chart: right})); }"""


def test_every_head_of_a_12_head_model_can_be_chosen_in_the_chart_at_1280(st_app, hd_page):
    """minilm's row of 12 head buttons ran past Heatmaps' 476 px column (to 1163 px; the chart ends at 856 px):
    heads 7–11 were not on screen. The row is a dropdown now, inside the chart."""
    from attnlab.model.registry import model_choices

    if "minilm" not in model_choices():
        pytest.skip("minilm is not installed")
    visit(hd_page, st_app["url"], "heatmaps", {"model": "minilm"})
    menus = hd_page.evaluate(MENUS_JS, "head")
    assert menus and all(m["right"] <= m["chart"] + 1 for m in menus), menus
    chart = hd_page.locator(".st-key-fig-head .js-plotly-plot")
    chart.scroll_into_view_if_needed()
    chart.locator(".updatemenu-header", has_text="head 0").click()  # open the dropdown, scroll to the last head
    first = chart.locator(".updatemenu-dropdown-button", has_text="head 1").first
    expect(first).to_have_attribute("opacity", "1")
    first.hover()
    hd_page.mouse.wheel(0, 600)
    chart.locator(".updatemenu-dropdown-button", has_text="head 11").click()
    expect(chart.locator(".gtitle")).to_have_text("layer 5, head 11")

# every colour bar title of the page's charts: its right edge and its chart's (page px)
BAR_TITLES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(el => {
  const right = el.querySelector('.main-svg').getBoundingClientRect().right;
  return [...el.querySelectorAll('.cbtitle text')].filter(t => t.textContent.trim())
    .map(t => ({text: t.textContent, over: Math.round(t.getBoundingClientRect().right - right)})); })"""


def test_colour_bar_titles_stay_inside_wide_charts_at_1920_presenting(st_app, browser):
    """At 1920×1080 presenting the head matrix is 1430 px wide: its colour bar sat 2 % of the plot's width right
    of it and the bar's title 'weight' ran 7 px past the chart's edge (on Heatmaps and Rollout)."""
    ctx = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        text = " ".join(["alex has a best friend named mary ."] * 10)
        over = {}
        for path in ("heatmaps", "rollout"):
            open_page(page, f"{st_app['url']}/{path}?{urllib.parse.urlencode({'text': text, 'present': '1'})}")
            drawn(page, True)
            titles = page.evaluate(BAR_TITLES_JS)
            assert titles
            over[path] = [t for t in titles if t["over"] > 0]
        clean(page)
    finally:
        ctx.close()
    assert over == {"heatmaps": [], "rollout": []}
