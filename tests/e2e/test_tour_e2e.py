"""The Lecture tour in Debian's chromium: every step paints its chart with no exception and no JS error, Next /
Previous / Back walk the steps (and the URL), a bad step= falls back to step 1 with a note, each step's view
opens on its own page, and in presentation mode figure and narrative fit a 1024×768 projector without
scrolling. Screenshots go to artifacts/tour-*.png."""

from __future__ import annotations

import re

from attnlab.app.tour import STEPS

from tests.e2e.conftest import ARTIFACTS
from tests.e2e.test_browser_mech import clean, open_page, painted, wait_idle

N = len(STEPS)
KIND = {3: "scatter", 8: "bar", 10: "bar", 16: "scatter"}  # the chart kind each step paints (heatmap otherwise)


def heading(page, k: int):
    return page.get_by_role("heading", name=re.compile(rf"^Step {k} of {N}:"))


def at_step(page, k: int) -> None:
    from playwright.sync_api import expect

    page.wait_for_url(re.compile(rf"step={k}(&|$)"))
    wait_idle(page)
    expect(heading(page, k)).to_be_visible()
    painted(page, "tour", KIND.get(k, "heatmap"))


def test_next_previous_and_back_walk_every_step(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/tour?step=1")
    at_step(page, 1)
    for k in range(2, N + 1):
        page.get_by_role("button", name="Next").click()
        at_step(page, k)
        expect(page.get_by_text("Look at:")).to_be_visible()
        clean(page)
    expect(page.get_by_role("button", name="Next")).to_be_disabled()
    page.screenshot(path=str(ARTIFACTS / "tour-last.png"))
    page.get_by_role("button", name="Previous").click()
    at_step(page, N - 1)
    page.go_back()
    at_step(page, N)
    page.go_back()
    at_step(page, N - 1)
    clean(page)


def test_the_quiz_step_shows_what_its_narrative_says(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/tour?step=4")
    at_step(page, 4)
    expect(page.get_by_text(re.compile(r"α₂,₂ = e¹/\(e¹\+e¹\) = 0\.50"))).to_be_visible()
    assert page.locator(".st-key-fig-tour").get_by_text("0.50").count() >= 2  # α₂,₁ = α₂,₂ in the cells
    clean(page)


def test_a_bad_step_falls_back_to_step_one_with_a_note(st_app, page):
    from playwright.sync_api import expect

    for raw in ("abc", "0", "99"):
        open_page(page, f"{st_app['url']}/tour?step={raw}")
        at_step(page, 1)
        expect(page.get_by_text(re.compile(r"showing step 1"))).to_be_visible()
        clean(page)


def test_open_this_view_on_its_page(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/tour?step=6")
    at_step(page, 6)
    href = page.get_by_role("link", name=re.compile("Open this view on its page")).get_attribute("href")
    assert href.startswith("/heatmaps?model=lecture-decoder&preset=decoder-induction-1&layer=")
    open_page(page, st_app["url"] + href)
    expect(page.get_by_role("heading", name=re.compile(r"Heatmaps$"))).to_be_visible()
    layer = re.search(r"layer=(\d)", href).group(1)
    page.wait_for_url(re.compile(rf"layer={layer}"))  # the page kept the tour's layer
    clean(page)


def test_presentation_mode_fits_a_projector(st_app, browser):
    ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        open_page(page, f"{st_app['url']}/tour?step=1&present=1")
        for k in range(1, N + 1):
            if k > 1:
                page.get_by_role("button", name="Next").click()
            at_step(page, k)
            page.evaluate("window.scrollTo(0, 0); document.querySelectorAll('*').forEach(e => { e.scrollTop = 0; })")
            chart = page.locator(".st-key-fig-tour").bounding_box()
            look = page.get_by_text("Look at:").bounding_box()
            link = page.get_by_role("link", name=re.compile("Open this view on its page")).bounding_box()
            assert chart["y"] + chart["height"] <= 768 and chart["x"] + chart["width"] <= 1024, (k, chart)
            assert look["y"] + look["height"] <= 768 and link["y"] + link["height"] <= 768, (k, look, link)
            assert page.locator('[data-testid="stSidebar"]').is_hidden()  # no sidebar while presenting
            if k in (1, 9):
                page.screenshot(path=str(ARTIFACTS / f"tour-present-{k}.png"))
        clean(page)
    finally:
        ctx.close()


def test_the_flash_steps_slider_walks_the_tiles(st_app, page):
    """Step 11's stepper in the browser: moving the slider to tile 3 blanks the partial outputs of tiles 4.. and
    moves the marks on m and l to tile 3; the eager row stays."""
    open_page(page, f"{st_app['url']}/tour?step=11")
    at_step(page, 11)
    plot = ".st-key-fig-tour .js-plotly-plot"
    tiles = page.evaluate(f"document.querySelector('{plot}').layout.sliders[0].steps.length")
    label = page.locator(f"{plot} .slider-label-group").filter(has_text="3").first.bounding_box()
    rail = page.locator(f"{plot} .slider-rail-rect").first.bounding_box()
    page.mouse.click(label["x"] + label["width"] / 2, rail["y"] + rail["height"] / 2)  # on the rail above "3"
    page.wait_for_function(f"document.querySelector('{plot}').data[2].x[0] === 3")
    z = page.evaluate(f"document.querySelector('{plot}').data[4].z")  # [tiles + 1, d]
    assert len(z) == tiles + 1 and all(v is None for row in z[3:-1] for v in row)
    assert all(v is not None for row in z[:3] + z[-1:] for v in row)
    assert page.evaluate(f"document.querySelector('{plot}').data[3].x[0]") == 3
    assert page.evaluate(f"document.querySelector('{plot}').layout.shapes[0].y0") == 1.5  # tile 3's strip
    clean(page)
