"""The warm start (app/warm.py): a server started as `attnlab app` starts it answers its health check while the
opening page's presets are still being visited, says when they are done, and a student's first visit after that
finds the caches warm."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from attnlab.app.warm import DONE, base_url, opening_queries, visit
from attnlab.bench.server import streamlit_server
from attnlab.model.registry import default_model


def test_opening_queries_are_the_default_models_presets():
    from attnlab.app.presets import presets

    ids = [p.id for p in presets(default_model())]
    assert opening_queries() == ["", *(f"preset={i}" for i in ids[1:])] and len(ids) > 1


def test_base_url_reads_the_server_flags():
    assert base_url(["run", "x.py", "--server.address", "0.0.0.0", "--server.port", "8600"]) == "http://127.0.0.1:8600"
    assert base_url(["run", "x.py", "--server.address", "10.0.0.5"]) == "http://10.0.0.5:8501"


def test_fresh_server_warms_in_the_background(tmp_path: Path):
    log = tmp_path / "server.log"
    with streamlit_server(log, warm=True, timeout=120) as srv:
        t0 = time.perf_counter()
        assert DONE not in log.read_text()  # healthy before the visits are over
        while DONE not in log.read_text():
            assert time.perf_counter() - t0 < 300, log.read_text()[-2000:]
            time.sleep(0.2)
        line = next(s for s in log.read_text().splitlines() if s.startswith(DONE))
        m = re.fullmatch(rf"{DONE} (\d+) visits in [\d.]+ s \(the first ([\d.]+) s\)", line)
        assert m and int(m[1]) == len(opening_queries()), line
        student = asyncio.run(visit(srv["url"], ""))  # the first student: the model loaded, the run cached
        assert student < float(m[2]), (student, line)
    assert "Traceback" not in log.read_text()
