"""A job in the browser (app.job_view): the progress bar polls by itself until the result replaces it, and Cancel
stops the job and says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import EXC
from tests.e2e.st_server import streamlit_server


@pytest.fixture(scope="module")
def probe(browser, tmp_path_factory):
    with streamlit_server(tmp_path_factory.mktemp("job") / "server.log",
                          entry=Path(__file__).with_name("job_probe_app.py")) as srv:
        yield srv


def test_progress_polls_until_the_result(browser, probe):
    from playwright.sync_api import expect

    page = browser.new_page()
    page.goto(probe["url"] + "/?key=poll")
    expect(page.locator('[data-testid="stProgress"]')).to_be_visible()
    expect(page.get_by_text("Counting slowly:")).to_be_visible()
    expect(page.get_by_text("result 780")).to_be_visible(timeout=30_000)  # no click: the fragment's poll reran
    expect(page.locator('[data-testid="stProgress"]')).to_have_count(0)
    assert page.locator(EXC).count() == 0
    page.close()


def test_cancel_says_so_in_one_line(browser, probe):
    from playwright.sync_api import expect

    page = browser.new_page()
    page.goto(probe["url"] + "/?key=cancel")
    expect(page.locator('[data-testid="stProgress"]')).to_be_visible()
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_text("Counting slowly: cancelled at")).to_be_visible()
    expect(page.get_by_role("button", name="Run it again")).to_be_visible()
    assert page.get_by_text("result 780").count() == 0 and page.locator(EXC).count() == 0
    page.close()
