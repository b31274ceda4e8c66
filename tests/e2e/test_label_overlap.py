"""No two tick labels overlap on any tour step, at 1024×768 in presentation mode and at 1400 px: the figures thin
their tick labels to what the chart's width holds (hover still names every token). A figure that keeps every
label of a long token axis is counted (the check can fail)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from attnlab.app.tour import STEPS
from plotly.offline import get_plotlyjs

from tests.e2e.label_boxes import label_report, troubles
from tests.e2e.test_browser_mech import clean, open_page
from tests.e2e.test_tour_e2e import at_step

N = len(STEPS)


def overlapping(page) -> list:
    """Pairs of tick labels whose boxes overlap, over every figure on the page (tests/e2e/label_boxes.py)."""
    return [pair for r in label_report(page) for pair in r["pairs"]]


@pytest.mark.parametrize("size, present", [((1024, 768), True), ((1400, 1000), False)], ids=["projector", "wide"])
def test_no_tick_labels_overlap_on_any_tour_step(st_app, browser, size, present):
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    found = {}
    try:
        open_page(page, f"{st_app['url']}/tour?step=1" + ("&present=1" if present else ""))
        for k in range(1, N + 1):
            if k > 1:
                page.get_by_role("button", name="Next").click()
            at_step(page, k)
            if trouble := troubles(page):
                found[k] = trouble
        clean(page)
    finally:
        ctx.close()
    assert found == {}


def test_the_count_finds_overlapping_labels(browser, tmp_path):
    fig = go.Figure(go.Heatmap(z=np.random.default_rng(0).random((3, 60))))
    fig.update_xaxes(tickmode="array", tickvals=list(range(60)), ticktext=[f"token{i}" for i in range(60)])
    fig.update_layout(width=500, height=300)
    (tmp_path / "f.html").write_text(f"<html><head><script>{get_plotlyjs()}</script></head><body><div id=f></div>"
                                     f"<script>var f={pio.to_json(fig)};Plotly.newPlot('f',f.data,f.layout);</script>")
    ctx = browser.new_context(viewport={"width": 800, "height": 600})
    page = ctx.new_page()
    try:
        page.goto((tmp_path / "f.html").as_uri())
        page.wait_for_selector(".xtick text")
        assert len(overlapping(page)) > 50
    finally:
        ctx.close()


def test_at_1024_px_with_the_sidebar_the_tours_charts_keep_a_readable_width(st_app, browser):
    """Without presentation mode the sidebar takes a third of a 1024 px window: the narrative moves below the
    figure instead of squeezing it (it was 30–70 px of heatmap), on every step."""
    ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    narrow = {}
    try:
        open_page(page, f"{st_app['url']}/tour?step=1")
        for k in range(1, N + 1):
            if k > 1:
                page.get_by_role("button", name="Next").click()
            at_step(page, k)
            box = page.locator(".st-key-fig-tour").bounding_box()
            plots = [p["width"] for p in page.locator(".st-key-fig-tour .nsewdrag").evaluate_all(
                "els => els.map(e => e.getBoundingClientRect())")]
            # the plot area: 200 px at least, summed over a figure's panels (step 2's q/k/v strips sit side by side)
            if box["width"] < 500 or sum(plots) < 200 or overlapping(page):
                narrow[k] = (box["width"], plots, overlapping(page)[:3])
        clean(page)
    finally:
        ctx.close()
    assert narrow == {}
