"""A lecturer builds a tour in Debian's chromium: "Add this view to my tour" on Heatmaps (minilm, layer 3, head 5,
a text with HTML and odd Unicode in it) and on Masks, deletes the tour file's first step, moves a step, writes
words with HTML in them and saves the file; a server started on that file (what `attnlab app --tour FILE` sets)
shows the words as text and each step's link reopens the very view saved (widgets and the figure's data)."""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest

from tests.e2e.st_server import streamlit_server
from tests.e2e.test_browser_mech import clean, open_page, wait_idle

ODD = "Zoë <b>bold</b> & <img src=x onerror=alert(1)> naïve 𝔘𝔫𝔦 👩‍🔬 the the"
WORDS = "Look <script>alert(1)</script> at <b>this</b> & **that**"
FIRST = {"title": "Mine", "steps": [{"builtin": "masks", "page": "step-by-step", "title": "First of the file"}]}


@pytest.fixture
def tour_server(browser, tmp_path):
    def start(doc: dict, name: str):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        return streamlit_server(tmp_path / f"{name}.log", env={"ATTNLAB_TOUR": str(tmp_path / f"{name}.json")})
    return start


def view_of(page) -> dict:
    """The page's widgets (label -> value) and its first figure's first trace (x labels, z's first rows)."""
    wait_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=90_000)
    return page.evaluate("""() => {
      const w = {};
      document.querySelectorAll('[data-testid="stSelectbox"], [data-testid="stSlider"]').forEach(el => {
        const s = el.querySelector('[role=slider]'), i = el.querySelector('input');
        w[el.querySelector('label').innerText.trim()] = s ? s.getAttribute('aria-valuenow') : i && i.value; });
      const t = document.querySelector('.js-plotly-plot').data[0];
      return {widgets: w, x: Array.from(t.x || []), z: JSON.stringify(t.z).slice(0, 2000)};
    }""")


def settled_view(page, want: dict, seconds: float = 60) -> dict:
    """view_of(page) once it equals `want`, or as it is after `seconds` (a rerun can leave the previous page's chart
    in place for a moment after Streamlit reports idle: CI once read an all-ones placeholder without labels)."""
    got, end = view_of(page), time.monotonic() + seconds
    while got != want and time.monotonic() < end:
        page.wait_for_timeout(500)
        got = view_of(page)
    return got


def add_view(page) -> None:
    wait_idle(page)
    page.get_by_role("button", name="Add this view to my tour").click()
    wait_idle(page)


def test_build_save_and_reopen_a_tour(tour_server, page, browser):
    from playwright.sync_api import expect

    with tour_server(FIRST, "first") as srv:
        q = urllib.parse.urlencode({"model": "minilm", "preset": "custom", "text": ODD, "layer": "3", "head": "5"})
        open_page(page, f"{srv['url']}/heatmaps?{q}")
        heat = view_of(page)
        assert heat["widgets"]["Model"] == "minilm" and heat["widgets"]["Head"] == "5"
        assert "H0 · 2 &lt;" in heat["x"] and len(set(heat["x"])) == len(heat["x"])  # escaped; repeats kept apart
        assert sum(x.endswith(" the") for x in heat["x"]) == 2 * 12  # "the the" in each of the 12 heads
        add_view(page)
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Masks", exact=True).click()
        masks = view_of(page)
        add_view(page)
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Lecture tour", exact=True).click()
        wait_idle(page)
        expect(page.get_by_text("Mine: 3 steps, each a view with its settings and your words.")).to_be_visible()
        page.get_by_text("Edit this tour", exact=True).click()
        page.get_by_role("button", name="Delete this step").click()
        wait_idle(page)
        expect(page.get_by_role("heading", name="Step 1 of 2: Heatmaps: my view")).to_be_visible()
        later = page.get_by_role("button", name="Move later")
        expect(later).to_be_visible()  # the editor stays open after a delete changes the view above it
        later.click()
        wait_idle(page)
        expect(page.get_by_role("heading", name="Step 2 of 2: Heatmaps: my view")).to_be_visible()
        words = page.get_by_label("Your words (Markdown)")
        words.fill(WORDS)
        words.press("Control+Enter")
        wait_idle(page)
        with page.expect_download() as got:
            page.get_by_role("button", name="Save the tour (JSON)").click()
        saved = json.loads(open(got.value.path(), encoding="utf-8").read())
        clean(page)
    assert [(s["page"], s["text"]) for s in saved["steps"]] == [("masks", ""), ("heatmaps", WORDS)]
    assert saved["steps"][1]["state"]["text"] == ODD and saved["steps"][1]["state"]["head"] == "5"

    with tour_server(saved, "saved") as srv:
        for k, before in ((1, masks), (2, heat)):
            open_page(page, f"{srv['url']}/tour?step={k}")
            if k == 2:  # the words as text: no <b> or <script> element made from them
                expect(page.get_by_text("Look <script>alert(1)</script> at <b>this</b> & that", exact=True)) \
                    .to_be_visible()
                assert page.locator('[data-testid="stMarkdownContainer"] b').count() == 0
            href = page.get_by_role("link", name=re.compile("Show this view")).get_attribute("href")
            open_page(page, srv["url"] + href)
            assert settled_view(page, before) == before
        clean(page)
