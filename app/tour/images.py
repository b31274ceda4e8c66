"""Each tour step's figure as a PNG and an SVG at projector size (1024×768), rendered by kaleido (≥ 1: plotly.js
in the system chromium, no network) from the printable figure; all steps in one zip."""

from __future__ import annotations

import asyncio
import io
import re
import unicodedata
import zipfile
from concurrent.futures import ThreadPoolExecutor

import plotly.graph_objects as go
from attnlab.app.figures.printable import printable
from attnlab.app.tour.core import Step, View
from attnlab.app.tour.handout import chromium

SIZE = (1024, 768)  # px: the projector the tour is fitted to
FORMATS = ("png", "svg")
MISSING = "PNG/SVG export needs kaleido ≥ 1 and chromium: pip install kaleido (apt-get install chromium)"


def available() -> str:
    """'' when kaleido can render here, else the one line that says what is missing."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return MISSING
    return "" if chromium() else MISSING


def file_stem(n: int, step: Step) -> str:
    """'step-03-scaled-dot-product': the step's number and its title's first words, safe as a file name."""
    plain = unicodedata.normalize("NFKD", step.title.split(":")[0]).encode("ascii", "ignore").decode().lower()
    words = re.sub(r"[^a-z0-9]+", "-", plain).strip("-")  # "Ünïcode" -> "unicode", not "n-code"
    words = words[:40].rstrip("-")
    return f"step-{n:02d}-{words}" if words else f"step-{n:02d}"


def render(figs: list[go.Figure], fmts=FORMATS) -> list[list[bytes]]:
    """[figure][format] image bytes at projector size, all drawn by one browser; RuntimeError when kaleido or
    chromium is missing."""
    if bad := [f for f in fmts if f not in FORMATS]:
        raise ValueError(f"unknown format {bad[0]!r}; choose one of {', '.join(FORMATS)}")
    if missing := available():
        raise RuntimeError(missing)
    import kaleido

    async def draw():
        async with kaleido.Kaleido(n=1, page_generator=kaleido.PageGenerator(mathjax=False)) as k:  # no CDN
            return [[await k.calc_fig(printable(f, *SIZE), opts={"format": fmt, "width": SIZE[0], "height": SIZE[1]})
                     for fmt in fmts] for f in figs]

    with ThreadPoolExecutor(1) as pool:  # a thread of its own: the caller may already run an event loop
        return pool.submit(asyncio.run, draw()).result()


def figure_image(fig: go.Figure, fmt: str) -> bytes:
    """One figure as `fmt` ('png' or 'svg') at projector size (starts a browser: a few seconds)."""
    return render([fig], (fmt,))[0][0]


def images_zip(pairs: list[tuple[Step, View]]) -> bytes:
    """Every step's figure as PNG and SVG in one zip, named step-NN-title.png / .svg."""
    drawn = render([v.fig for _, v in pairs])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, ((step, _), images) in enumerate(zip(pairs, drawn), 1):
            for fmt, data in zip(FORMATS, images):
                z.writestr(f"{file_stem(n, step)}.{fmt}", data)
    return buf.getvalue()
