"""A warm start: `attnlab app` serves the app from this module, which starts Streamlit in this process and, in
the background, visits the opening page (Explore, `/`) once per preset of the default model, as a browser would
(Streamlit's websocket, one session per preset). The model loads and every cache the opening page reads fills
before the first student arrives; the health endpoint answers from the start.

    python -m attnlab.app.warm run app/main.py --server.port 8501 …   (the arguments of `streamlit run`)

The server's log gets one line when the visits are done: "attnlab warm start: 11 visits in 14.3 s (the first 12.10 s)".
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import urllib.request

from attnlab.app.presets import presets
from attnlab.model.registry import default_model

DONE = "attnlab warm start:"  # the log line's start (bench/browser.py waits for it)
HEALTH_WAIT_S = 120  # how long the visitor waits for the server to answer at all
VISIT_S = 600  # the most one visit may take (a first load of a large model included)

log = logging.getLogger("attnlab.app")


def opening_queries() -> list[str]:
    """The query strings of the opening page's visits: the default model's first preset (`/`), then each other
    preset by its id."""
    ids = [p.id for p in presets(default_model())]
    return ["", *(f"preset={i}" for i in ids[1:])]


def healthy(base: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


async def visit(base: str, query: str, timeout: float = VISIT_S) -> float:
    """Open the opening page with `query` in a new session and read until its script run finishes: seconds."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect

    t0 = time.perf_counter()
    async with connect(base.replace("http://", "ws://") + "/_stcore/stream", subprotocols=["streamlit"],
                       max_size=2**27, open_timeout=60) as ws:
        msg = BackMsg()
        msg.rerun_script.query_string, msg.rerun_script.page_name = query, ""
        await ws.send(msg.SerializeToString())
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout)  # ConnectionClosed when the server closes the session
            f = ForwardMsg()
            f.ParseFromString(raw)
            if f.WhichOneof("type") == "script_finished":
                return time.perf_counter() - t0


def warm(base: str, queries: list[str] | None = None) -> None:
    """Wait for the server at `base`, then visit each query in turn; one log line says how it went."""
    t0 = time.perf_counter()
    while not healthy(base):
        if time.perf_counter() - t0 > HEALTH_WAIT_S:
            log.warning("%s the server did not answer in %d s; no warm start", DONE, HEALTH_WAIT_S)
            return
        time.sleep(0.2)
    try:
        queries = opening_queries() if queries is None else queries
        seconds = [asyncio.run(visit(base, q)) for q in queries]
    except Exception as e:  # noqa: BLE001 — a failed warm start only leaves the caches cold
        log.warning("%s stopped (%s: %s)", DONE, type(e).__name__, str(e)[:200])
        return
    print(f"{DONE} {len(queries)} visits in {time.perf_counter() - t0:.1f} s (the first {seconds[0]:.2f} s)",
          file=sys.stderr, flush=True)


def base_url(argv: list[str]) -> str:
    """http://host:port of the server `streamlit run` argv starts (0.0.0.0 and :: are reached on 127.0.0.1)."""
    def flag(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    host = flag("--server.address", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{flag('--server.port', '8501')}"


def main(argv: list[str]) -> int:
    """Start the warm-up visitor in a daemon thread, then Streamlit itself with `argv`."""
    from streamlit.web import cli

    threading.Thread(target=warm, args=(base_url(argv),), name="attnlab-warm", daemon=True).start()
    sys.argv = ["streamlit", *argv]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
