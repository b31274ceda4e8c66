"""One head everywhere (issue 31), in Debian's chromium: a press of the head matrix's own layer/head buttons
switches the matrix in the browser at once, and then the page's other views, its captions, its Layer and Head
choices and the URL name that head too; the matrix keeps showing exactly the captured numbers of the pressed
head after the run (the run does not send it back to the head it was built on)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from attnlab.bench.chromium import IDLE, WATCH_RUN_JS, frames, wait_chart
from attnlab.bench.widgets import chart_button
from attnlab.model.registry import load

from tests.e2e.conftest import EXC
from tests.e2e.test_fast_views import visible

TEXT = "Ada sat on the mat"
RAN_AND_IDLE = f"() => window.__ran === true && !!document.querySelector('{IDLE}')"


@pytest.fixture(scope="module")
def run():
    lm = load("random-decoder")
    return lm.capture(lm.encode(TEXT))


def title(page, key: str) -> str:
    """The chart's title as read: its lines (a title wrapped to the chart's width) joined by spaces."""
    el = page.locator(f'.st-key-fig-{key}:not([data-stale="true"]) .g-gtitle .gtitle').first
    return el.evaluate("e => { const lines = [...e.querySelectorAll('tspan.line')];"
                       " return lines.length ? lines.map(t => t.textContent).join(' ') : e.textContent; }")


def paragraph(page, start: str) -> str:
    """The text of the page's paragraph that contains `start`."""
    return page.locator('[data-testid="stMarkdownContainer"] p').filter(has_text=start).first.inner_text()


def active(page, key: str) -> str:
    """The label of the chosen button of the segmented control with Streamlit key `key`."""
    return page.locator(f'.st-key-{key} button[aria-checked="true"], .st-key-{key} button[kind$="Active"]'
                        ).first.inner_text()


def press(page, key: str, menu: str, value: int) -> None:
    """Press the chart's own button and wait for the script run it starts to end."""
    page.evaluate(WATCH_RUN_JS)
    chart_button(page, key, menu, value)
    page.wait_for_function(RAN_AND_IDLE, timeout=90_000)
    frames(page)


def close_up_is(page, run, lyr: int, h: int) -> None:
    got = visible(page)
    assert got["head"] == [lyr, h] and got["title"] == f"layer {lyr}, head {h}"
    want = np.where(run.mask_of("self"), run.matrices("self")[lyr, h], np.nan)
    assert np.allclose(got["z"], want, atol=1e-6, equal_nan=True)


def test_heatmaps_chart_buttons_move_the_head_view_neuron_view_and_captions(st_app, page, run):
    page.goto(f"{st_app['url']}/heatmaps?model=random-decoder&text={TEXT.replace(' ', '%20')}&layer=1&head=0")
    wait_chart(page, "head")
    wait_chart(page, "headview")
    assert "(layer 1, head 0)" in title(page, "headview")
    for menu, value, (lyr, h) in (("head", 2, (1, 2)), ("layer", 0, (0, 2)), ("head", 1, (0, 1))):
        press(page, "head", menu, value)
        close_up_is(page, run, lyr, h)  # still the pressed head after the run
        assert title(page, "headview").endswith(f"(layer {lyr}, head {h})")
        assert f"layer {lyr}, head {h}," in paragraph(page, "One score, neuron by neuron")
        assert active(page, "layer") == str(lyr) and active(page, "head") == str(h)
        assert f"layer={lyr}" in page.url and f"head={h}" in page.url
    # a choice above still moves everything, the matrix included
    page.evaluate(WATCH_RUN_JS)
    page.locator(".st-key-head button").filter(has_text=re.compile(r"^3$")).first.click()
    page.wait_for_function(RAN_AND_IDLE, timeout=90_000)
    wait_chart(page, "head")
    close_up_is(page, run, 0, 3)
    assert title(page, "headview").endswith("(layer 0, head 3)")
    assert page.locator(EXC).count() == 0 and page.errors == [], (page.locator(EXC).all_inner_texts(), page.errors)


def test_score_scales_chart_buttons_move_the_tables_and_curves(st_app, page, run):
    page.goto(f"{st_app['url']}/scores?model=random-decoder&text={TEXT.replace(' ', '%20')}&layer=0&head=0")
    wait_chart(page, "cf")
    wait_chart(page, "boxes")
    for menu, value, (lyr, h) in (("head", 3, (0, 3)), ("layer", 1, (1, 3))):
        press(page, "cf", menu, value)
        shown = re.sub(r"</?b>", "", page.evaluate(
            "() => document.querySelector('.st-key-fig-cf .js-plotly-plot').layout.title.text"))
        assert shown.startswith(f"layer {lyr}, head {h}:")
        assert page.get_by_role("heading", name=f"Score distributions, layer {lyr}").count() == 1
        assert f"(layer {lyr}, head {h};" in paragraph(page, "From q·kᵀ to the score the softmax sees")
        assert f"layer={lyr}" in page.url and f"head={h}" in page.url
    assert page.locator(EXC).count() == 0 and page.errors == [], (page.locator(EXC).all_inner_texts(), page.errors)
