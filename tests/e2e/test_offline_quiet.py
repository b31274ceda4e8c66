"""Quiet and offline: a browser walking Explore, Backends (which measures peak memory with the PyTorch profiler)
and the tour asks no host but the server (the favicon is a file the server sends, not Google's Material Symbols),
and the server log gets no profiler lines."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlparse

from tests.e2e.test_browser_mech import clean, open_page, painted

LOCAL = {"127.0.0.1", "localhost", "::1", "[::1]"}
PROFILER = ("USDT:", "STAGE:", "profiler_start", "profiler_stop")


def test_no_request_leaves_the_machine_and_the_log_stays_quiet(st_app, browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    try:
        open_page(page, st_app["url"])
        painted(page, "explore-rows")
        open_page(page, f"{st_app['url']}/backends?model=lecture-decoder&be_max=256")
        painted(page, "be-live", "scatter")
        open_page(page, f"{st_app['url']}/tour?step=2")
        painted(page, "tour")
        clean(page)
        favicon = page.evaluate("[...document.querySelectorAll('link[rel*=icon]')].map(l => l.href)")
    finally:
        ctx.close()
    outside = [u for u in asked if urlparse(u).scheme in ("http", "https", "ws", "wss")
               and urlparse(u).hostname not in LOCAL]
    assert len(asked) > 20 and outside == []
    assert favicon and all(urlparse(f).hostname in LOCAL or f.startswith("data:") for f in favicon), favicon
    log = open(st_app["log"], encoding="utf-8", errors="replace").read()
    assert not [line for line in log.splitlines() if line.startswith(PROFILER)]


def test_peak_memory_prints_no_profiler_line():
    code = ("from attnlab.analysis.machinery.backends import time_attention; "
            "r = time_attention([64, 128], repeats=1, memory=True); print(len(r), r[0]['peak_bytes'] > 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.split() == ["6", "True"] and done.stderr == ""
