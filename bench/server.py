"""Start `streamlit run app/main.py` on a free loopback port (browser tests, `attnlab bench --browser`); stop exactly that process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from attnlab.app.serve import ENTRY, streamlit_command

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never proxy 127.0.0.1


def _die_with_parent() -> None:
    """In the child: get SIGTERM when pytest dies (PR_SET_PDEATHSIG), so no server is orphaned."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with _NO_PROXY.open(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200 and r.read().strip() == b"ok"
    except OSError:
        return False


@contextmanager
def streamlit_server(log_path: Path, extra_args: tuple[str, ...] = (), timeout: float = 60.0, attempts: int = 3,
                     entry: Path = ENTRY, warm: bool = False, env: dict | None = None):
    """Yield {"url", "pid", "startup_s", "log"} of a headless server running `entry` (default the app; `warm`: with
    the warm start of `attnlab app`, app/warm.py; `env`: added to the environment); SIGTERM it (then SIGKILL) at
    the end."""
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "PYTHONUNBUFFERED": "1", **(env or {})}
    last = ""
    for _ in range(attempts):  # the free port may be taken before streamlit binds it
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = streamlit_command("127.0.0.1", port, entry, extra_args, warm)
        log = open(log_path, "w")  # noqa: SIM115 — closed in finally
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=_die_with_parent)
        try:
            while proc.poll() is None and time.perf_counter() < t0 + timeout:
                if healthy(url):
                    break
                time.sleep(0.1)
            else:
                last = Path(log_path).read_text()[-3000:]
                continue
            yield {"url": url, "pid": proc.pid, "startup_s": time.perf_counter() - t0, "log": log_path}
            return
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            log.close()
    raise RuntimeError(f"streamlit was not healthy after {attempts} tries:\n{last}")
