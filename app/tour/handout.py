"""The tour as a handout: one self-contained HTML file (plotly.js embedded from the installed plotly package,
no CDN; each step's title, narrative, numbers and interactive figure, its figure JSON kept in a
<script type="application/json"> block), and a PDF of the same printed by headless chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import plotly.io as pio
from attnlab.app.tour import STEPS
from attnlab.app.tour.core import Step, View
from plotly.offline import get_plotlyjs

PRINT_TIMEOUT_S = 120
CSS = """body { font-family: sans-serif; max-width: 980px; margin: 2em auto; color: #222; }
section { page-break-after: always; margin-bottom: 3em; }
.fig { width: 100%; } code { background: #f2f2f2; padding: 0 .2em; }
table { border-collapse: collapse; font-size: .85em; } td { border: 1px solid #ccc; padding: 2px 6px; }
.look { color: #c25e00; }"""


def views(present: bool = False) -> list[tuple[Step, View]]:
    """Every step built now, in order."""
    return [(s, s.build(present)) for s in STEPS]


def md_html(text: str) -> str:
    """The narrative's Markdown (only **bold** and `code` spans) as safe HTML: everything else escaped."""
    out, pos = [], 0
    for m in re.finditer(r"(`+) ?(.*?) ?\1(?!`)", text):
        out.append(_bold(text[pos : m.start()]))
        out.append(f"<code>{html.escape(m.group(2))}</code>")
        pos = m.end()
    out.append(_bold(text[pos:]))
    return "".join(out)


def _bold(s: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(s))


def _number(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else html.escape(json.dumps(v, ensure_ascii=False, default=str))


def section(step: Step, view: View) -> str:
    """One step: title, narrative, what to look at, the figure (its JSON inline) and the numbers."""
    n = step.topic
    fig = pio.to_json(view.fig, validate=False).replace("</", "<\\/")  # no "</script>" inside the JSON block
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{_number(v)}</td></tr>" for k, v in view.numbers.items())
    return (f'<section id="step-{n}"><h2>Step {n} of {len(STEPS)}: {html.escape(step.title)}</h2>'
            f"<p>{md_html(view.narrative)}</p><p class=look>Look at: {html.escape(view.look)}</p>"
            f'<div class="fig" id="fig-{n}"></div>'
            f'<script type="application/json" id="fig-json-{n}">{fig}</script>'
            f"<script>(function(){{var f=JSON.parse(document.getElementById('fig-json-{n}').textContent);"
            f"Plotly.newPlot('fig-{n}',f.data,f.layout,{{displaylogo:false,responsive:true}});}})();</script>"
            f"<details><summary>The numbers</summary><table>{rows}</table></details></section>")


def handout_html(pairs: list[tuple[Step, View]]) -> str:
    """The whole handout as one HTML document that needs no network."""
    body = "".join(section(s, v) for s, v in pairs)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>attnlab: the lecture in '
            f"{len(pairs)} steps</title><style>{CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>Attention, step by step: the lecture in {len(pairs)} steps</h1>"
            "<p>Every number below was computed from the bundled models when this file was made.</p>"
            f"{body}</body></html>")


def embedded_figures(doc: str) -> dict[int, dict]:
    """Step number -> the figure JSON a handout embeds (what a test compares with the app's figures)."""
    found = re.finditer(r'<script type="application/json" id="fig-json-(\d+)">(.*?)</script>', doc, re.S)
    return {int(m.group(1)): json.loads(m.group(2).replace("<\\/", "</")) for m in found}


def chromium() -> str | None:
    """The system chromium (Debian's wrapper), if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def print_pdf(doc: str, out: Path, browser: str | None = None) -> Path:
    """`doc` printed to `out` by headless chromium (it runs plotly.js first); RuntimeError if it cannot."""
    browser = browser or chromium()
    if not browser:
        raise RuntimeError("chromium is not installed: install it (apt-get install chromium) to print the PDF")
    out = Path(out).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "handout.html"
        page.write_text(doc, encoding="utf-8")
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-pdf-header-footer", "--virtual-time-budget=20000", f"--print-to-pdf={out}", page.as_uri()]
        done = subprocess.run(cmd, capture_output=True, timeout=PRINT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium did not print the PDF (exit {done.returncode})")
    return out
