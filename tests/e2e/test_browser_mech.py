"""The mechanics pages in Debian's chromium: each opens, paints its charts, reacts to a widget (the new value
reaches the URL and the chart repaints), and shows no exception and no uncaught JS error. Screenshots go to
artifacts/mech-*.png."""

from __future__ import annotations

import re

from tests.e2e.conftest import ARTIFACTS, EXC

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
PAINT = {  # what a painted chart of each kind contains
    "heatmap": ".heatmaplayer image[*|href^='data:']",  # xlink:href: any namespace
    "bar": ".barlayer .point path",
    "scatter": ".scatterlayer .trace path.js-line",
}


def wait_idle(page) -> None:
    page.wait_for_selector(IDLE, state="attached", timeout=90_000)


def frames(page, n: int = 2) -> None:
    page.evaluate("n => new Promise(r => { const f = k => k ? requestAnimationFrame(() => f(k - 1)) : r(); f(n); })", n)


def painted(page, key: str, kind: str = "heatmap") -> None:
    """Wait until the chart drawn with frame.chart(key=...) has real pixels (scrolled into view first)."""
    fresh = f'.st-key-fig-{key}:not([data-stale="true"])'  # a rerun's outgoing copy may linger a moment
    box = page.locator(fresh)
    box.wait_for(state="attached", timeout=90_000)
    box.scroll_into_view_if_needed()
    page.wait_for_selector(f"{fresh} {PAINT[kind]}", state="attached", timeout=90_000)
    frames(page)


def title_of(page, key: str):
    return page.locator(f".st-key-fig-{key} .g-gtitle .gtitle").first  # the figure title


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("h1", timeout=90_000)
    wait_idle(page)


def clean(page) -> None:
    assert page.locator(EXC).count() == 0, page.locator(EXC).all_inner_texts()
    assert page.errors == []


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"mech-{name}.png"))


def slider_step(page, label: str, key: str = "ArrowRight") -> None:
    s = page.get_by_role("slider", name=label).first
    s.focus()
    s.press(key)


def test_kv_cache(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/kv-cache?model=random-decoder")
    expect(page.get_by_role("heading", name=re.compile(r"KV cache$"))).to_be_visible()
    expect(page.get_by_text("Verdict — the same numbers")).to_be_visible()
    painted(page, "kv-steps", "bar")
    painted(page, "kv-stitched")
    painted(page, "kv-diff")
    shot(page, "kv-cache")
    slider_step(page, "New tokens to generate")
    expect(page.get_by_text("Generating 13 tokens")).to_be_visible()
    page.wait_for_url(re.compile(r"kv_n=13"))
    wait_idle(page)
    painted(page, "kv-steps", "bar")
    assert page.locator(".st-key-fig-kv-steps .barlayer .point").count() == 13
    painted(page, "kv-prefix", "scatter")
    shot(page, "kv-cache-why")
    clean(page)


def test_backends(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/backends?model=random-decoder&be_max=256")
    expect(page.get_by_text("This machine has no CUDA GPU")).to_be_visible()
    painted(page, "be-grid")
    painted(page, "be-live", "scatter")
    shot(page, "backends")
    slider_step(page, "Head")
    expect(page.get_by_text(re.compile(r", head 1: kernel"))).to_be_visible()
    page.wait_for_url(re.compile(r"be_head=1"))
    wait_idle(page)
    painted(page, "be-recomputed")
    painted(page, "be-diff")
    shot(page, "backends-recovery")
    clean(page)


def test_step_by_step_quiz(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/step-by-step")
    painted(page, "sbs-weights")
    assert page.locator(".st-key-fig-sbs-weights").get_by_text("0.500").count() == 2  # α₂,₁ = α₂,₂ printed
    shot(page, "step-by-step")
    page.get_by_text("Quiz mode").click()
    expect(page.get_by_text("Quiz", exact=True)).to_be_visible()
    wait_idle(page)
    box = page.get_by_role("spinbutton", name="Your answer (0 to 1)")
    box.fill("0.5")
    box.press("Enter")
    expect(page.get_by_text("Correct: α_2,2 = 0.500")).to_be_visible()
    wait_idle(page)
    painted(page, "sbs-weights")
    assert "sbs_quiz=1" in page.url and "sbs_ask=2%2C2" in page.url
    shot(page, "step-by-step-quiz")
    clean(page)


def test_cross_attention(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/cross-attention")
    expect(page.get_by_role("heading", name=re.compile(r"Cross-attention$"))).to_be_visible()
    painted(page, "x-mosaic")
    painted(page, "x-cross")
    shot(page, "cross-attention")
    page.get_by_role("combobox", name="Head").click()
    page.get_by_role("option", name="head 1", exact=True).click()
    expect(title_of(page, "x-cross")).to_contain_text("head 1")
    wait_idle(page)
    painted(page, "x-cross")
    slider_step(page, "Step")
    expect(title_of(page, "x-step")).to_contain_text("step 1")
    wait_idle(page)
    painted(page, "x-replay")
    assert "x_step=1" in page.url
    shot(page, "cross-attention-replay")
    clean(page)


def test_positions(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/positions?pos_scheme=sinusoidal")
    painted(page, "pos-sin")
    painted(page, "pos-sin-waves", "scatter")
    shot(page, "positions")
    page.get_by_role("radio", name="ALiBi").click()
    expect(title_of(page, "pos-alibi")).to_contain_text("ALiBi bias per head")
    page.wait_for_url(re.compile(r"pos_scheme=alibi"))
    wait_idle(page)
    painted(page, "pos-alibi")
    painted(page, "pos-alibi-w", "scatter")
    shot(page, "positions-alibi")
    page.get_by_role("radio", name="RoPE").click()
    expect(title_of(page, "pos-rope")).to_contain_text("RoPE")
    wait_idle(page)
    painted(page, "pos-spread", "scatter")
    shot(page, "positions-rope")
    clean(page)


def test_generate(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/generate?gen_n=8")
    painted(page, "gen-matrix")
    shot(page, "generate")
    slider_step(page, "Temperature")
    expect(page.get_by_text(re.compile(r"sampled at temperature 0\.1"))).to_be_visible()
    page.wait_for_url(re.compile(r"gen_temp=0\.1"))
    wait_idle(page)
    painted(page, "gen-matrix")
    painted(page, "gen-step")
    page.locator(".st-key-fig-gen-matrix .updatemenu-button").first.click()  # ▶ replay: a Plotly animation, no rerun
    frames(page, 10)
    shot(page, "generate-sampled")
    clean(page)


def test_dark_theme_and_presentation_mode(dark_app, page):
    """Dark theme: the app is dark and the charts paint; presentation mode enlarges the figures."""
    open_page(page, f"{dark_app['url']}/step-by-step?present=1&sbs_quiz=1")
    painted(page, "sbs-scaled")
    bg = page.evaluate("getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor")
    assert bg != "rgb(255, 255, 255)"
    shot(page, "step-by-step-dark-present")
    open_page(page, f"{dark_app['url']}/generate?gen_n=6&model=random-decoder")
    painted(page, "gen-matrix")
    shot(page, "generate-dark")
    clean(page)
