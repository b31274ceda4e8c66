"""The Long inputs page in Debian's chromium: fill the 4,000-character sample, see the pooled overview and
the exact window painted, no exception and no uncaught JS error. Screenshot: artifacts/long-inputs.png."""

from __future__ import annotations

import re

from tests.e2e.test_browser_mech import clean, open_page, painted, shot, title_of, wait_idle


def test_long_input_overview_and_window(st_app, page):
    from playwright.sync_api import expect

    open_page(page, f"{st_app['url']}/long-inputs?long_model=random-long-decoder")
    expect(page.get_by_role("heading", name=re.compile(r"Long inputs$"))).to_be_visible()
    expect(page.get_by_text("The text is empty")).to_be_visible()
    page.get_by_role("button", name=re.compile(r"Fill a long sample")).click()
    wait_idle(page)
    painted(page, "long-overview")
    expect(title_of(page, "long-overview")).to_contain_text("all 4,001 tokens (max over 8×8 blocks)")
    painted(page, "long-window")
    expect(title_of(page, "long-window")).to_contain_text("rows 3873–4000, keys 3873–4000 (exact)")
    expect(page.get_by_text(re.compile(r"4,001 tokens · kernel: .* · sent \d\.\d\d MB"))).to_be_visible()
    shot(page, "long-inputs")
    clean(page)
