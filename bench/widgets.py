"""The widgets a lecturer uses, how the browser bench changes each one, and the pages and cases it measures
them on (bench/browser.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def button(page, key: str, value) -> None:
    """Click the button labelled `value` of the button group with Streamlit key `key`."""
    page.locator(f".st-key-{key} button").filter(has_text=re.compile(rf"^{value}$")).first.click()


def combo(page, label: str, nth: int) -> None:
    """Open the select box `label` and pick its nth option."""
    box = page.get_by_role("combobox", name=label).first
    box.scroll_into_view_if_needed()
    box.click()
    page.get_by_role("option").nth(nth).click()


def chart_button(page, key: str, menu: str, i: int) -> None:
    """Click the chart's own Plotly button labelled "{menu} {i}" (only the visible rows are drawn)."""
    page.evaluate("""([key, label]) => {
      const el = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
      const b = [...el.querySelectorAll('.updatemenu-button')].find(
        g => g.querySelector('.updatemenu-item-text').textContent === label);
      b.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    }""", [key, f"{menu} {i}"])


@dataclass(frozen=True)
class Widget:
    """One widget change: `act(page, i, chart)` sets value i % 2 (two different values), watched on the chart
    `chart` (None: on the script run it starts; the backend may leave every number as it was); the chart's own
    buttons are those of the chart `chart`."""

    name: str
    chart: str | None
    act: Callable


WIDGETS = {
    "layer": Widget("layer", "head", lambda p, i, _: button(p, "layer", [0, 1][i % 2])),
    "head": Widget("head", "head", lambda p, i, _: button(p, "head", [1, 0][i % 2])),
    "query token": Widget("query token", "headview", lambda p, i, _: combo(p, "Query token (head view)", [1, 2][i % 2])),
    "matrix kind": Widget("matrix kind", "mosaic", lambda p, i, _: combo(p, "Matrix", [1, 0][i % 2])),
    "backend": Widget("backend", None, lambda p, i, _: combo(p, "Backend", [1, 0][i % 2])),
    "preset": Widget("preset", "mosaic", lambda p, i, _: combo(p, "Preset", [1, 0][i % 2])),
    "chart head": Widget("chart head", "head", lambda p, i, key: chart_button(p, key, "head", [1, 0][i % 2])),
    "chart layer": Widget("chart layer", "head", lambda p, i, key: chart_button(p, key, "layer", [0, 1][i % 2])),
}
# page → (url path, the first chart's key, {widget measured there: the chart it changes, None = the script run})
PAGES = {"heatmaps": ("heatmaps", "mosaic", {w: WIDGETS[w].chart for w in WIDGETS}),
         "masks": ("masks", "panels", {"layer": "panels", "head": "panels", "backend": None, "preset": "panels",
                                       "chart head": "panels", "chart layer": "panels"}),
         "scores": ("scores", "boxes", {"layer": None, "head": None, "backend": None, "preset": None,
                                        "chart head": "cf", "chart layer": "cf"}),
         "tour": ("tour", "tour", {"next step": "tour"})}  # measured by bench/tour.py: Next through every step
CASE_PAGES = {"random-long-decoder T=512": ("heatmaps",)}  # cases measured on fewer pages (the rest: all)
QUICK = ("heatmaps", ("head",))


CASES = (  # (label, URL query): the bundled decoder on its first preset, and a long random-decoder text
    ("lecture-decoder", "model=lecture-decoder"),
    ("random-long-decoder T=512", "model=random-long-decoder&text=" + "ab" * 255 + "a"),  # 512 tokens with [BOS]
)
