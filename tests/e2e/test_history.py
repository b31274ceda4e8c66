"""Back and Forward step through a page's views in Debian's chromium (Streamlit pushes a history entry for each
URL the app writes; url_state reseeds the widgets from the URL on Back), and the navigation shows every page in
sections with Material icons."""

from __future__ import annotations

import re

from tests.e2e.conftest import ARTIFACTS
from tests.e2e.test_browser import check_clean, open_app, pick, wait_idle
from tests.e2e.test_browser_mech import title_of

TEXT = "the cat sat on the mat"


def head_shown(page, head: int) -> None:
    """The close-up's title names `head`, the URL says head=<head>, and the button group has it selected."""
    from playwright.sync_api import expect

    expect(title_of(page, "head")).to_have_text(re.compile(rf"head {head}$"))
    expect(page).to_have_url(re.compile(rf"[?&]head={head}(&|$)"))
    wait_idle(page)


def test_back_returns_the_previous_head(st_app, page):
    from playwright.sync_api import expect

    open_app(page, f"{st_app['url']}/heatmaps?model=random-decoder&text={TEXT.replace(' ', '+')}&head=0")
    head_shown(page, 0)
    for h in (1, 3):
        pick(page, "head", h)
        head_shown(page, h)
    page.go_back()
    head_shown(page, 1)
    page.go_back()
    head_shown(page, 0)
    page.go_forward()
    head_shown(page, 1)
    pick(page, "head", 2)  # after Back, a click still changes the view (the URL no longer wins)
    head_shown(page, 2)
    page.get_by_role("link", name=re.compile("Masks")).click()  # Back across pages returns to the same head
    expect(page).to_have_url(re.compile(r"/masks\?"))
    expect(page.get_by_role("heading", name="Masks")).to_be_visible()
    wait_idle(page)
    page.go_back()
    expect(page).to_have_url(re.compile(r"/heatmaps\?"))
    head_shown(page, 2)
    check_clean(page)


def test_navigation_sections_show_every_page_with_material_icons(st_app, page):
    from attnlab.app.navigation import PAGES, SECTIONS
    from playwright.sync_api import expect

    open_app(page, st_app["url"])
    nav = page.locator('[data-testid="stSidebarNav"]')
    for section in SECTIONS:
        expect(nav.get_by_text(section, exact=True)).to_be_visible()
    assert nav.get_by_role("button", name=re.compile("View .* more")).count() == 0
    links = nav.locator('[data-testid="stSidebarNavLink"]')
    expect(links).to_have_count(len(PAGES))
    for _, title, _, icon in PAGES:  # a Material icon is a ligature: its name is the icon element's text
        link = links.filter(has_text=title).first
        expect(link).to_be_visible()
        assert icon[len(":material/"):-1] in link.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    nav.screenshot(path=str(ARTIFACTS / "navigation-sections.png"))
    check_clean(page)
