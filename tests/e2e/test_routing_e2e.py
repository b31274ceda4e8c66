"""The Routing page in Debian's chromium: the tokens × experts heatmap, the load bars and the entropy lines
paint; choosing another layer redraws the heatmap and goes into the URL; no exception, no JS error.
Screenshots go to artifacts/mech-routing*.png."""

from __future__ import annotations

import re

from tests.e2e.test_browser_mech import clean, open_page, painted, shot, title_of, wait_idle


def test_routing_page_paints_and_follows_the_layer(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/routing?model=lecture-moe&preset=decoder-induction-1")
    expect(page.get_by_role("heading", name=re.compile(r"Routing$"))).to_be_visible()
    painted(page, "rt-gates")
    expect(title_of(page, "rt-gates")).to_contain_text("Layer 0: router weight")
    painted(page, "rt-load", "bar")
    painted(page, "rt-entropy", "scatter")
    expect(page.get_by_text(re.compile(r"forced to E\d at layer 0"))).to_be_visible()
    shot(page, "routing")
    page.get_by_role("radio", name="2", exact=True).first.click()
    page.wait_for_url(re.compile(r"rt_layer=2"))
    wait_idle(page)
    expect(title_of(page, "rt-gates")).to_contain_text("Layer 2: router weight")
    painted(page, "rt-gates")
    expect(page.get_by_text(re.compile(r"forced to E\d at layer 2"))).to_be_visible()
    shot(page, "routing-layer2")
    clean(page)
