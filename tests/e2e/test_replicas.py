"""bench/replicas.sh: two `attnlab app` replicas behind nginx on loopback. Each browser session stays on its
replica (the page, its scripts and the /_stcore/stream websocket: nginx's access log, keyed by the sticky
cookie), both replicas serve, and a page works through the proxy."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest
from attnlab.bench.chromium import new_page, wait_chart
from attnlab.bench.replicas import nginx_path
from attnlab.bench.replicas import replicas as start_replicas


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    if nginx_path() is None:
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail("nginx is missing (scripts/test.sh installs it: apt-get install nginx)")
        pytest.skip("nginx is missing (apt-get install nginx); set E2E_REQUIRE_BROWSER=1 to fail instead")
    with start_replicas(2, tmp_path_factory.mktemp("replicas")) as r:
        yield r


def _by_session(access_log: Path) -> dict[str, set[str]]:
    """sticky key → the replicas that served it (every request after the first visit carries the cookie)."""
    seen = defaultdict(set)
    for line in access_log.read_text().splitlines():
        cookie, key, upstream, _status, uri = line.split("|", 4)
        if upstream and upstream != "-":
            seen[key].add(upstream)
    return seen


def test_sessions_stay_on_their_replica_and_both_serve(replicas, browser):
    served, sessions = set(), []
    for _ in range(8):  # new sessions until both replicas have served one (the key is random per first visit)
        ctx, page = new_page(browser)
        resp = page.goto(f"{replicas['url']}/heatmaps?model=random-decoder&text=Ada%20sat")
        first = resp.headers["x-attnlab-replica"]
        wait_chart(page, "head")
        assert page.locator('[data-testid="stException"]').count() == 0 and page.errors == []
        cookie = next(c["value"] for c in ctx.cookies() if c["name"] == "attnlab_sticky")
        for _ in range(2):  # later visits of the same session: the same replica
            assert page.reload().headers["x-attnlab-replica"] == first
            wait_chart(page, "head")
        sessions.append((ctx, cookie, first))
        served.add(first)
        if len(served) == 2 and len(sessions) >= 2:
            break
    assert served == replicas["ports"]
    for ctx, _, _ in sessions:
        ctx.close()  # nginx logs a websocket when it closes
    time.sleep(1.0)
    log = _by_session(replicas["folder"] / "access.log")
    for _, cookie, first in sessions:
        assert log[cookie] == {first}, (cookie, log[cookie])  # page, scripts, websocket: one replica
    stream = [ln for ln in (replicas["folder"] / "access.log").read_text().splitlines() if "/_stcore/stream" in ln]
    assert stream and all(ln.split("|")[0] for ln in stream)  # the websocket carried the sticky cookie


def test_nginx_compresses_the_scripts_streamlit_sends_plain(replicas):
    import gzip
    import re
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never proxy 127.0.0.1
    page = opener.open(f"{replicas['url']}/").read().decode()
    script = re.search(r'src="\.?/?(static/js/[^"]+\.js)"', page).group(1)
    direct = opener.open(f"http://{sorted(replicas['ports'])[0]}/{script}")
    plain = direct.read()
    assert direct.headers.get("Content-Encoding") is None and len(plain) > 100_000  # Streamlit: uncompressed
    resp = opener.open(urllib.request.Request(f"{replicas['url']}/{script}", headers={"Accept-Encoding": "gzip"}))
    body = resp.read()
    assert resp.headers["Content-Encoding"] == "gzip" and len(body) < len(plain) / 2
    assert gzip.decompress(body) == plain
