"""Every page of the navigation (app/navigation.py), opened at its default view, at 1024×768 in presentation mode
and at 1400×900 without: no two tick labels of a chart overlap and no chart title is cut (tests/e2e/label_boxes.py
counts them). Prints the counts of each page."""

from __future__ import annotations

import pytest
from attnlab.app.navigation import PAGES
from playwright.sync_api import Error as PlaywrightError

from tests.e2e.conftest import EXC
from tests.e2e.label_boxes import label_report
from tests.e2e.test_browser_mech import frames, open_page, wait_idle
from tests.e2e.test_navigation_walk import NO_CHART

# every chart container holds a drawn Plotly chart (two svg layers) and no run is pending
DRAWN_JS = """() => { const boxes = document.querySelectorAll('[data-testid="stPlotlyChart"]');
  return [...boxes].every(b => { const el = b.querySelector('.js-plotly-plot');
    return el && el._fullLayout && el.querySelectorAll('.main-svg').length >= 2; }); }"""
VIEWS = {"projector": ((1024, 768), True), "wide": ((1400, 900), False)}


def drawn(page, charted: bool) -> None:
    """Wait for the page's script run to end and every chart on it to be drawn (`charted`: at least one), then
    for resizes to settle."""
    wait_idle(page)
    if charted:
        page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot .main-svg', timeout=60_000)
    page.wait_for_function(DRAWN_JS, timeout=120_000)
    frames(page, 3)
    page.wait_for_timeout(500)
    wait_idle(page)
    page.wait_for_function(DRAWN_JS, timeout=120_000)


def page_labels(browser, url: str, size: tuple[int, int], present: bool) -> dict[str, dict]:
    """{page title: {charts, pairs (overlapping tick labels), cut (titles cut), where (chart key → counts),
    errors}} for every page of the navigation at its default view."""
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    ctx.set_default_timeout(60_000)
    out = {}
    try:
        for _file, title, path, _icon in PAGES:
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            open_page(page, f"{url}/{path}" + ("?present=1" if present else ""))
            try:
                drawn(page, title not in NO_CHART)
            except PlaywrightError as e:
                errors.append(f"not drawn: {str(e)[:80]}")
            errors += page.locator(EXC).all_inner_texts()
            rows = label_report(page)
            out[title] = {"charts": len(rows), "pairs": sum(len(r["pairs"]) for r in rows),
                          "cut": sum(len(r["cut"]) for r in rows), "errors": errors,
                          "where": {r["key"]: (r["width"], len(r["pairs"]), r["cut"], r["pairs"][:2])
                                    for r in rows if r["pairs"] or r["cut"]}}
            page.close()
    finally:
        ctx.close()
    return out


@pytest.mark.parametrize("view", list(VIEWS))
def test_no_label_overlaps_or_cut_titles_on_any_page(st_app, browser, view):
    size, present = VIEWS[view]
    found = page_labels(browser, st_app["url"], size, present)
    for title, r in found.items():
        print(f"{view} {title}: {r['charts']} charts, {r['pairs']} overlapping pairs, {r['cut']} titles cut",
              *(f"\n    error: {e[:300]}" for e in r["errors"]),
              *(f"\n    {k}: {v}" for k, v in r["where"].items()))
    assert sorted(found) == sorted(p[1] for p in PAGES)
    assert all(r["charts"] for t, r in found.items() if t not in NO_CHART)  # every page drew its charts
    bad = {t: (r["pairs"], r["cut"], r["errors"]) for t, r in found.items() if r["pairs"] or r["cut"] or r["errors"]}
    assert bad == {}
