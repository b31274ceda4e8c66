"""scripts/replicas.sh: two `attnlab app` replicas behind nginx on loopback. Each browser session stays on its
replica (the page, its scripts and the /_stcore/stream websocket: nginx's access log, keyed by the sticky
cookie), both replicas serve, and a page works through the proxy."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from bench.browser import new_page, wait_chart
from bench.server import ROOT, free_port, healthy

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def _free_block(k: int) -> int:
    """A port p with p … p+k all free on loopback."""
    for _ in range(50):
        p = free_port()
        if p + k < 65535 and all(_free(p + i) for i in range(1, k + 1)):
            return p
    raise RuntimeError("no free block of ports")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    if NGINX is None:
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail("nginx is missing (scripts/test.sh installs it: apt-get install nginx)")
        pytest.skip("nginx is missing (apt-get install nginx); set E2E_REQUIRE_BROWSER=1 to fail instead")
    folder = tmp_path_factory.mktemp("replicas")
    port = _free_block(2)
    env = os.environ | {"PYTHON": sys.executable, "ATTNLAB_REPLICAS_DIR": str(folder),
                        "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "PATH": f"{os.environ['PATH']}:/usr/sbin"}
    log = open(folder / "script.log", "w")  # noqa: SIM115 — closed below
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "replicas.sh"), "2", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while not healthy(url):
            assert proc.poll() is None, (folder / "script.log").read_text()
            assert time.monotonic() < end, "nginx + replicas not healthy in 120 s"
            time.sleep(0.3)
        yield {"url": url, "folder": folder, "ports": {f"127.0.0.1:{port + 1}", f"127.0.0.1:{port + 2}"}}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the script's own group: nginx and the two replicas
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


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
