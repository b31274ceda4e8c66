"""bench/replicas.sh from Python (the replica test, `attnlab bench --class --replicas K`): K `attnlab app`
processes behind nginx on a free block of loopback ports, stopped with the script's whole process group."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from attnlab.bench.server import free_port, healthy

from attnlab.data import data_folder


def nginx_path() -> str | None:
    """Debian's nginx (on PATH or /usr/sbin), or None."""
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    return path if os.access(path, os.X_OK) else None


def free_block(k: int) -> int:
    """A port p with p … p+k all free on loopback."""
    for _ in range(50):
        p = free_port()
        if p + k < 65535 and all(_free(p + i) for i in range(1, k + 1)):
            return p
    raise RuntimeError("no free block of ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@contextmanager
def replicas(k: int, folder: Path, timeout: float = 120.0):
    """Yield {"url" (nginx), "pid" (the script: nginx and the replicas are its children), "folder",
    "ports" (the replicas' "127.0.0.1:port")} once nginx answers; SIGTERM the script's group at the end."""
    if nginx_path() is None:
        raise RuntimeError("nginx not found (apt-get install nginx)")
    port = free_block(k)
    env = os.environ | {"PYTHON": sys.executable, "ATTNLAB_REPLICAS_DIR": str(folder),
                        "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "PATH": f"{os.environ['PATH']}:/usr/sbin"}
    log = open(folder / "script.log", "w")  # noqa: SIM115 — closed below
    proc = subprocess.Popen(["bash", str(data_folder("bench") / "replicas.sh"), str(k), str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + timeout
        while not healthy(url):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"nginx + {k} replicas not healthy:\n{(folder / 'script.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield {"url": url, "pid": proc.pid, "folder": folder,
               "ports": {f"127.0.0.1:{port + i}" for i in range(1, k + 1)}}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the script's own group: nginx and the replicas
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
