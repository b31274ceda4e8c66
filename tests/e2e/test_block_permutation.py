"""The Block and Permutation pages in Debian's chromium: each opens, paints its charts and shows no exception
and no uncaught JS error. Screenshots go to artifacts/mech-*.png."""

from __future__ import annotations

import re

from tests.e2e.test_browser_mech import clean, open_page, painted, shot


def test_block_page_paints(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/block?model=random-decoder")
    expect(page.get_by_role("heading", name=re.compile(r"Block$"))).to_be_visible()
    painted(page, "blk-norms", "bar")
    painted(page, "blk-vectors")
    shot(page, "block")
    clean(page)


def test_permutation_page_paints(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/permutation")
    expect(page.get_by_role("heading", name=re.compile(r"Permutation$"))).to_be_visible()
    painted(page, "perm-table")
    shot(page, "permutation")
    clean(page)
