"""Browser fixtures: a Streamlit server per session, Debian's chromium through Playwright.

Without chromium the e2e tests skip, unless E2E_REQUIRE_BROWSER=1 (CI), where they fail.
Never `playwright install`: `executable_path` points at the system browser.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.st_server import ROOT, streamlit_server

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "artifacts"
EXC = '[data-testid="stException"]'


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _need_browser():
    if not os.access(CHROMIUM, os.X_OK):
        msg = f"chromium not found at {CHROMIUM} (set CHROMIUM_PATH or apt-get install chromium)"
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail("the playwright package is missing")
        pytest.skip("the playwright package is missing")


@pytest.fixture(scope="session")
def browser():
    _need_browser()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=30_000)  # expect() has its own 5 s default
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS, timeout=60_000)
        yield b
        b.close()


@pytest.fixture(scope="session")
def st_app(browser, tmp_path_factory):
    with streamlit_server(tmp_path_factory.mktemp("st") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="session")
def dark_app(browser, tmp_path_factory):
    """A second server in Streamlit's dark theme, shared by the dark-theme tests."""
    with streamlit_server(tmp_path_factory.mktemp("st-dark") / "dark.log", ("--theme.base", "dark")) as srv:
        yield srv


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def page(browser, artifacts, request):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        pg.screenshot(path=str(artifacts / f"FAILED-{request.node.name}.png"))
    ctx.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    setattr(item, "rep_" + rep.when, rep)
