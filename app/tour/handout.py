"""The tour as a handout: one self-contained HTML file (plotly.js embedded from the installed plotly package,
no CDN; each step's title, narrative, numbers and figure, its figure JSON kept in a <script type="application/json">
block), laid out for A4 or US Letter, and a PDF of the same printed by headless chromium. Every figure carries its own
colours and margins (app/figures/printable.py) and no toolbar."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import plotly.io as pio
from attnlab.app.figures.printable import printable
from attnlab.app.tour import STEPS
from attnlab.app.tour.core import Step, View
from attnlab.app.tour.tour_file import tour_json
from plotly.offline import get_plotlyjs

PRINT_TIMEOUT_S = 120
MARGIN_MM = 12
PAPERS = {"a4": ("A4", 210.0), "letter": ("letter", 215.9)}  # CSS page size, paper width in mm
CSS = """body { font-family: sans-serif; max-width: %(width)dpx; margin: 2em auto; color: #222; }
@page { size: %(size)s; margin: %(margin)dmm; }
@media print { body { margin: 0; } .modebar-container { display: none !important; } }
section { page-break-after: always; break-after: page; margin-bottom: 3em; }
section h2 { break-after: avoid; } .fig { width: %(width)dpx; break-inside: avoid; }
code { background: #f2f2f2; padding: 0 .2em; }
table { border-collapse: collapse; font-size: .85em; } td { border: 1px solid #ccc; padding: 2px 6px; }
.look { color: #c25e00; }"""


def figure_width(paper: str) -> int:
    """The printable width of `paper` inside its margins, in CSS px (96 per inch)."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; choose one of {', '.join(PAPERS)}")
    return round((PAPERS[paper][1] - 2 * MARGIN_MM) / 25.4 * 96)


def views(present: bool = False, steps: list[Step] | None = None) -> list[tuple[Step, View]]:
    """Every step (default: the built-in tour) built now, in order."""
    return [(s, s.build(present)) for s in (STEPS if steps is None else steps)]


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


def section(n: int, total: int, step: Step, view: View, width: int) -> str:
    """One step: title, narrative, what to look at, the figure (its JSON inline) and the numbers."""
    fig = pio.to_json(printable(view.fig, width), validate=False).replace("</", "<\\/")  # no "</script>" inside
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{_number(v)}</td></tr>" for k, v in view.numbers.items())
    look = f"<p class=look>Look at: {html.escape(view.look)}</p>" if view.look else ""
    table = f"<details><summary>The numbers</summary><table>{rows}</table></details>" if rows else ""
    return (f'<section id="step-{n}"><h2>Step {n} of {total}: {html.escape(step.title)}</h2>'
            f"<p>{md_html(view.narrative)}</p>{look}"
            f'<div class="fig" id="fig-{n}"></div>'
            f'<script type="application/json" id="fig-json-{n}">{fig}</script>'
            f"<script>(function(){{var f=JSON.parse(document.getElementById('fig-json-{n}').textContent);"
            f"Plotly.newPlot('fig-{n}',f.data,f.layout,{{displayModeBar:false}});}})();</script>"
            f"{table}</section>")


def handout_html(pairs: list[tuple[Step, View]], paper: str = "a4", title: str = "") -> str:
    """The whole handout as one HTML document that needs no network, laid out for `paper` ('a4' or 'letter')."""
    width = figure_width(paper)
    title = title or f"Attention, step by step: the lecture in {len(pairs)} steps"
    body = "".join(section(i, len(pairs), s, v, width) for i, (s, v) in enumerate(pairs, 1))
    css = CSS % {"width": width, "size": PAPERS[paper][0], "margin": MARGIN_MM}
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>attnlab: {html.escape(title)}'
            f"</title><style>{css}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1>"
            "<p>Every number below was computed from the bundled models when this file was made.</p>"
            f"{body}</body></html>")


def handout_apart(title: str, entries: list[dict], paper: str = "a4") -> str:
    """The handout of a tour with lecturer's views, built by `attnlab handout` in a process of its own: their
    figures come from running each page headless (AppTest), which must not share a process with a live server."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "tour.json", Path(tmp) / "tour.html"
        src.write_text(tour_json(title, entries), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "attnlab.cli.main", "handout", "--tour", str(src), "--out",
                               str(out), "--paper", paper], capture_output=True, text=True, timeout=PRINT_TIMEOUT_S * 5,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError((done.stderr.strip().splitlines() or ["attnlab handout failed"])[-1])
        return out.read_text(encoding="utf-8")


def embedded_figures(doc: str) -> dict[int, dict]:
    """Step number -> the figure JSON a handout embeds."""
    found = re.finditer(r'<script type="application/json" id="fig-json-(\d+)">(.*?)</script>', doc, re.S)
    return {int(m.group(1)): json.loads(m.group(2).replace("<\\/", "</")) for m in found}


def chromium() -> str | None:
    """The system chromium (Debian's wrapper), if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def print_pdf(doc: str, out: Path, browser: str | None = None) -> Path:
    """`doc` printed to `out` by headless chromium (it runs plotly.js first; the page size is the document's
    @page size); RuntimeError if it cannot."""
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
