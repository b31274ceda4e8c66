"""Presentation mode enlarges the page's text but leaves every page name in the sidebar whole."""

from __future__ import annotations

from tests.e2e.test_browser import open_app

CUT_JS = """() => [...document.querySelectorAll('[data-testid="stSidebarNavLink"], [data-testid="stSidebarNavLink"] *')]
  .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.textContent)"""


def test_presentation_mode_cuts_no_sidebar_item(st_app, page):
    open_app(page, st_app["url"] + "/?present=1")
    page.wait_for_selector('[data-testid="stSidebarNavLink"]')
    assert page.evaluate("() => getComputedStyle(document.documentElement).fontSize") == "19px"  # presentation on
    assert page.evaluate(CUT_JS) == []
