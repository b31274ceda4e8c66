"""The handout as chromium prints it: every figure with its own colours (no near-black heatmap: Streamlit's
placeholder scale `#000011…` left in a figure paints it nearly black), every tick label and title inside its
figure, no toolbar over a title; the PDF on A4 and US Letter, with no near-black block on any page. A figure
built the way the old handout built it shows all three faults (the checks can fail)."""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import streamlit.elements.plotly_chart  # noqa: F401 — registers Streamlit's template, as the app does
from attnlab.app.tour.handout import handout_html, print_pdf, views
from PIL import Image
from plotly.offline import get_plotlyjs

from tests.e2e.conftest import ARTIFACTS

DARK, DARK_SHARE = 35, 0.5  # a heatmap is near-black when over half its pixels have every channel under 35
LABELS = ".xtick text, .ytick text, .g-xtitle text, .g-ytitle text, .gtitle, .cbaxis text, .cbtitle text"
BOXES = f"""(root) => [...root.querySelectorAll('.js-plotly-plot')].map(fig => {{
  const f = fig.getBoundingClientRect();
  const box = e => {{ const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }};
  const shown = e => e.getBoundingClientRect().width > 0 && getComputedStyle(e).display !== 'none';
  const bar = [...fig.querySelectorAll('.modebar')].filter(e => shown(e) && getComputedStyle(e).opacity !== '0');
  return {{id: fig.id, fig: [f.left, f.top, f.right, f.bottom],
          labels: [...fig.querySelectorAll('{LABELS}')].filter(shown).map(e => [e.textContent, box(e)]),
          titles: [...fig.querySelectorAll('.gtitle')].filter(shown).map(box), bars: bar.map(box)}};
}})"""


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def faults(page) -> list[str]:
    """What would spoil the printed figures on `page`: near-black heatmaps, labels outside their figure, a
    toolbar over a title."""
    found = []
    for i, img in enumerate(page.locator(".js-plotly-plot .heatmaplayer image").all()):
        px = np.asarray(Image.open(io.BytesIO(img.screenshot())).convert("RGB"))
        dark = float((px.max(-1) < DARK).mean())
        if dark > DARK_SHARE:
            found.append(f"heatmap {i}: {dark:.0%} near-black pixels")
    for f in page.evaluate(BOXES, page.locator("body").element_handle()):
        x0, y0, x1, y1 = f["fig"]
        for text, (a, b, c, d) in f["labels"]:
            if a < x0 - 1 or b < y0 - 1 or c > x1 + 1 or d > y1 + 1:
                found.append(f"{f['id']}: label {text[:30]!r} outside its figure")
        found += [f"{f['id']}: toolbar over the title" for t in f["titles"] for m in f["bars"] if overlap(t, m)]
    return found


def show(page, doc: str, tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.html"
    path.write_text(doc, encoding="utf-8")
    page.emulate_media(media="print")
    page.goto(path.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    page.wait_for_timeout(500)  # two frames: the heatmaps' pixels are set after their nodes


@pytest.fixture(scope="module")
def pairs():
    return views()


@pytest.fixture
def wide(browser):
    ctx = browser.new_context(viewport={"width": 1000, "height": 1400})
    yield ctx.new_page()
    ctx.close()


def test_every_handout_figure_prints_with_its_own_colours_and_labels(pairs, wide, tmp_path):
    doc = handout_html(pairs, "a4")
    show(wide, doc, tmp_path, "handout")
    assert wide.locator(".js-plotly-plot").count() == len(pairs)
    assert wide.locator(".js-plotly-plot .heatmaplayer image").count() >= 10  # most steps are heatmaps
    assert faults(wide) == []
    wide.screenshot(path=str(ARTIFACTS / "handout-print.png"), full_page=True)


def test_the_checks_catch_the_old_handouts_faults(wide, tmp_path):
    """Streamlit's template, a 10 px margin under long row names and Plotly's toolbar: all three are found."""
    pio.templates.default = "streamlit"
    fig = go.Figure(go.Heatmap(z=np.arange(12.0).reshape(3, 4), y=["a row name that is long"] * 3))
    fig.update_layout(title="A title under the toolbar", margin={"l": 10, "r": 10, "t": 30, "b": 10}, width=600,
                      height=300)
    fig.update_yaxes(tickmode="array", tickvals=[0, 1, 2], ticktext=["a row name that is long", "b", "c"])
    doc = (f"<html><head><script>{get_plotlyjs()}</script></head><body><div id=f></div><script>"
           f"var f={pio.to_json(fig)};Plotly.newPlot('f',f.data,f.layout,{{displayModeBar:true}});</script>")
    show(wide, doc, tmp_path, "old")
    found = faults(wide)
    assert any("near-black" in f for f in found), found
    assert any("outside its figure" in f for f in found), found
    assert any("toolbar over the title" in f for f in found), found


@pytest.mark.parametrize("paper, size", [("a4", (595, 842)), ("letter", (612, 792))])
def test_the_pdf_is_on_the_chosen_paper_with_no_dark_block(pairs, paper, size, tmp_path):
    pdf = print_pdf(handout_html(pairs[:4], paper), tmp_path / f"tour-{paper}.pdf")
    if not shutil.which("pdfinfo"):
        pytest.skip("poppler-utils (pdfinfo, pdftoppm) not installed")
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    w, h = (float(v) for v in info.split("Page size:")[1].split("pts")[0].split(" x "))
    assert (round(w), round(h)) == size
    assert int(info.split("Pages:")[1].split()[0]) == 4  # one page per step
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(pdf), str(tmp_path / "p")], check=True)
    for page in sorted(tmp_path.glob("p-*.png")):
        px = np.asarray(Image.open(page).convert("RGB"))
        assert float((px.max(-1) < DARK).mean()) < 0.03, page.name  # text only: a dark heatmap would be ~20 %


def test_a_lecturers_tour_prints_as_cleanly(wide, tmp_path):
    """A tour file's own views (the Heatmaps page's mosaic, run headless) print with their colours and labels."""
    from attnlab.app.tour.tour_file import read_tour

    tour = read_tour('{"title": "My class", "steps": [{"builtin": "masks", "page": "step-by-step", "title": "Masks"},'
                     '{"page": "heatmaps", "state": {"model": "lecture-decoder", "layer": "1", "head": "2"},'
                     '"title": "Up close", "text": "Head **1.2**."}]}')
    show(wide, handout_html(views(False, tour.steps), "a4", tour.title), tmp_path, "mine")
    assert wide.locator(".js-plotly-plot").count() == 2
    assert wide.locator(".js-plotly-plot .heatmaplayer image").count() >= 2
    assert faults(wide) == []


TEXTS = ".annotation-text, .g-xtitle text, .g-ytitle text, .updatemenu-button text, .xtick text, .ytick text"


def test_a_lecturers_masks_view_prints_at_its_own_height(wide, tmp_path):
    """The Masks page's six panels keep the height the page built them for (~800 px, fixed margins): squeezed
    to the tour's 400 px, its tick labels ran over the next row's panel titles and its buttons over the first; its
    panel titles fit the printed width."""
    from attnlab.app.tour.tour_file import read_tour

    tour = read_tour('{"steps": [{"page": "masks", "state": {"model": "lecture-decoder"}, "title": "Masks"}]}')
    pairs = views(False, tour.steps)
    assert 780 <= pairs[0][1].fig.layout.height <= 820
    show(wide, handout_html(pairs, "a4", "Mine"), tmp_path, "masks")
    texts = wide.evaluate(f"""() => [...document.querySelectorAll('{TEXTS}')]
        .filter(e => e.getBoundingClientRect().width > 0)
        .map(e => {{ const r = e.getBoundingClientRect(); return [e.getAttribute('class') || e.parentNode.getAttribute('class'),
                     e.textContent, [r.left, r.top, r.right, r.bottom]]; }})""")
    titles = [t for t in texts if t[0] and "annotation" in t[0]]
    others = [t for t in texts if not (t[0] and "annotation" in t[0])]
    assert len(titles) == 6 and len(others) > 20  # tick labels, axis titles, the head buttons
    assert [(a[1], b[1]) for a in titles for b in others if overlap(a[2], b[2])] == []
    # the titles fit the printed panels: at A4 the scores' full title ran 12 px into the weights' title
    assert [(a[1], b[1]) for i, a in enumerate(titles) for b in titles[i + 1:] if overlap(a[2], b[2])] == []
    assert [t[1] for t in titles][:3] == ["A: mask (grey = hidden)", "A: scores (−∞ masked)", "A: attention weights"]
    assert faults(wide) == []
