"""The Vision page in Debian's chromium: the image and its overlays are painted (an image trace under a
heatmap, both drawn), the all-heads mosaic too, a map choice reaches the URL and repaints, and there is no
exception and no uncaught JS error. Screenshot: artifacts/mech-vision.png."""

from __future__ import annotations

import re

import pytest
from attnlab.model.registry import model_choices

from tests.e2e.test_browser_mech import clean, open_page, painted, shot, wait_idle

pytestmark = pytest.mark.skipif("lecture-vit" not in model_choices(kind="image"), reason="lecture-vit not bundled")

TRACES = """key => {
  const gd = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  // _fullData: the traces as plotly.js drew them (typed arrays decoded)
  return gd ? gd._fullData.map(t => ({type: t.type, rows: t.z ? t.z.length : 0, src: (t.source || '').slice(0, 22)}))
            : null;
}"""


def _overlay_painted(page, key: str) -> list[dict]:
    painted(page, key)  # the heatmap's colour-mapped image is in the DOM
    page.wait_for_selector(f".st-key-fig-{key} .imagelayer image", state="attached", timeout=90_000)  # the photo
    return page.evaluate(TRACES, key)


def test_vision_page_paints_its_overlays(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/vision")
    expect(page.get_by_role("heading", name=re.compile(r"Vision$"))).to_be_visible()
    traces = _overlay_painted(page, "overlay")
    assert [t["type"] for t in traces[:2]] == ["image", "heatmap"]
    assert traces[0]["src"] == "data:image/png;base64," and traces[1]["rows"] == 8  # lecture-vit: 8×8 patches
    mosaic = _overlay_painted(page, "mosaic")
    assert [t["type"] for t in mosaic[:2]] == ["image", "heatmap"] and mosaic[1]["rows"] == 8
    page.locator(".st-key-fig-distance").scroll_into_view_if_needed()
    page.wait_for_selector(".st-key-fig-distance .scatterlayer .point", state="attached", timeout=90_000)
    painted(page, "positions")
    shot(page, "vision")

    page.get_by_role("radio", name="rollout", exact=True).first.click()
    page.wait_for_url(re.compile(r"v_map=rollout"))
    wait_idle(page)
    expect(page.locator(".st-key-fig-overlay .gtitle").first).to_contain_text("rollout (mean fusion")
    assert [t["type"] for t in _overlay_painted(page, "overlay")[:2]] == ["image", "heatmap"]
    clean(page)
