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

from tests.e2e.test_browser_mech import clean, open_page
from tests.e2e.test_tour_e2e import at_step

N = len(STEPS)
SHRINK = 1.0  # px: boxes closer than this do not count as overlapping (anti-aliasing)
PAIRS = """() => {
  const hit = (a, b) => a[1] + S < b[3] && b[1] + S < a[3] && a[2] + S < b[4] && b[2] + S < a[4];
  const out = [];
  for (const fig of document.querySelectorAll('.js-plotly-plot')) {
    for (const axis of ['.xtick text', '.ytick text', '.x2tick text', '.y2tick text']) {
      const b = [...fig.querySelectorAll(axis)].filter(e => e.textContent.trim()).map(e => {
        const r = e.getBoundingClientRect(); return [e.textContent, r.left, r.top, r.right, r.bottom]; });
      for (let i = 0; i < b.length; i++) for (let j = i + 1; j < b.length; j++)
        if (hit(b[i], b[j])) out.push([b[i][0], b[j][0]]);
    }
  }
  return out;
}""".replace("S <", f"{SHRINK} <")


def overlapping(page) -> list:
    """Pairs of tick labels whose boxes overlap, over every figure on the page."""
    return page.evaluate(PAIRS)


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
            pairs = overlapping(page)
            if pairs:
                found[k] = (len(pairs), pairs[:3])
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


def test_at_1024_px_with_the_sidebar_the_tours_chart_keeps_a_readable_width(st_app, browser):
    """Without presentation mode the sidebar takes a third of a 1024 px window: the narrative moves below the
    figure instead of squeezing it (it was 30–70 px of heatmap)."""
    ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        open_page(page, f"{st_app['url']}/tour?step=1")
        at_step(page, 1)
        box = page.locator(".st-key-fig-tour").bounding_box()
        plot = page.locator(".st-key-fig-tour .nsewdrag").first.bounding_box()  # the heatmap's plot area
        assert box["width"] >= 500 and plot["width"] >= 200, (box, plot)
        assert overlapping(page) == []
        clean(page)
    finally:
        ctx.close()
