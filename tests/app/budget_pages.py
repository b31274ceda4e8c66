"""Every page of the app with one model and one long text, in this process, under the memory budget the
environment sets (ATTNLAB_MAX_MEMORY): prints one JSON line per page (its errors, warnings, exceptions, charts,
seconds) and a last line with the process's peak resident memory (VmHWM). Run by test_budget_pages.py in a
fresh process: python -m tests.app.budget_pages MODEL N_CHARS."""

from __future__ import annotations

import json
import sys
import time

from attnlab.app.navigation import PAGES

from tests.app.conftest import open_page


def hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


PROSE = ("When Mary and John went to the store, John gave a drink to Mary. The lecturer pasted a long essay "
         "into the box while every student in the room pressed the button at the same moment, and the server had "
         "to decide, before it started, whether the run would fit in the memory it was given. ")


def text_of(n: int) -> str:
    """n characters of plain English (SmolLM2 reads ~3.6 characters a token: 20,000 are ~5,600 tokens)."""
    return (PROSE * (n // len(PROSE) + 1))[:n]


def main(model: str, n_chars: int) -> None:
    from streamlit import config

    config.set_option("runner.enforceSerializableSessionState", False)
    text = text_of(n_chars)
    for file, *_ in PAGES:
        t0 = time.perf_counter()
        at = open_page(file.removesuffix(".py"), timeout=600, model=model, text=text, long_model=model,
                       long_text=text)  # the Long inputs page has its own model and text
        print(json.dumps({"page": file, "seconds": round(time.perf_counter() - t0, 1),
                          "errors": [e.value for e in at.error], "warnings": [w.value for w in at.warning],
                          "exceptions": [e.message for e in at.exception], "charts": len(at.get("plotly_chart")),
                          "hwm": hwm()}), flush=True)
    print(json.dumps({"peak": hwm()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
