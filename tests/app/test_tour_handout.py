"""The tour's handout: one HTML file that needs no network (plotly.js inside, every step's title, narrative,
numbers and figure JSON), every figure with its colours written out (no Streamlit placeholder), no toolbar, laid
out for A4 or US Letter; `attnlab handout` writes it without a warning, takes a lecturer's tour file, refuses a
bad one in one line, and zips every step's figure as PNG and SVG at 1024×768 (kaleido)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import plotly
import plotly.io as pio
import pytest
from attnlab.app.figures.printable import PLACEHOLDER, SEQUENTIAL
from attnlab.app.tour import STEPS
from attnlab.app.tour.handout import (
    chromium,
    embedded_figures,
    figure_width,
    handout_html,
    md_html,
    print_pdf,
    views,
)
from attnlab.app.tour.images import available, file_stem, images_zip
from attnlab.cli.main import main

N = len(STEPS)


@pytest.fixture(scope="module")
def built():
    pairs = views()
    return pairs, handout_html(pairs)


def test_every_step_is_in_the_handout_with_its_narrative_numbers_and_figure(built):
    pairs, doc = built
    figs = embedded_figures(doc)
    assert sorted(figs) == list(range(1, N + 1))
    for step, view in pairs:
        assert f"<h2>Step {step.topic} of {N}: {step.title}</h2>" in doc
        assert md_html(view.narrative) in doc
        app = json.loads(pio.to_json(view.fig))["data"]
        for mine, theirs in zip(figs[step.topic]["data"], app):  # the app's arrays, its colours written out
            assert {k: v for k, v in mine.items() if k != "colorscale"} == \
                   {k: v for k, v in theirs.items() if k != "colorscale"}
        for k, v in view.numbers.items():
            assert f"<td>{k}</td>" in doc and (f"{v:.4g}" in doc if isinstance(v, float) else True)
    assert doc.count("Plotly.newPlot(") == N


def test_every_figure_carries_its_own_colours_margins_and_no_toolbar(built):
    pairs, doc = built
    assert PLACEHOLDER.search(pio.to_json(pairs[0][1].fig))  # the app's figure leaves them to Streamlit
    for n, fig in embedded_figures(doc).items():
        text = json.dumps(fig)
        assert not PLACEHOLDER.search(text), n
        assert fig["layout"]["width"] == figure_width("a4") == 703
        assert fig["layout"]["yaxis"]["automargin"] is True and fig["layout"]["margin"]["l"] >= 16
        scales = [t["colorscale"] for t in fig["data"] if t["type"] == "heatmap"]
        assert all(s for s in scales), n
    seq = [t for f in embedded_figures(doc).values() for t in f["data"]
           if t["type"] == "heatmap" and t["colorscale"][-1][1] == SEQUENTIAL[-1]]
    assert len(seq) >= 5  # the theme's own sequential scale, written out (steps 1, 2, 6, 12, 14, 15 …)
    assert doc.count("{displayModeBar:false}") == N and "@page { size: A4; margin: 12mm; }" in doc
    assert "size: letter" in handout_html(pairs[:1], "letter") and figure_width("letter") == 725
    with pytest.raises(ValueError, match="unknown paper"):
        handout_html(pairs[:1], "a3")


def test_the_handout_needs_no_network(built):
    _, doc = built
    assert f"plotly.js v{plotly.offline.get_plotlyjs_version()}" in doc and plotly.offline.get_plotlyjs() in doc
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=[\"']?(https?:)?//", doc)
    assert len(re.findall(r"<script>", doc)) == N + 1  # plotly.js once, then one drawing script per step


def test_a_step_file_name_keeps_its_accented_letters_as_plain_ones():
    from attnlab.app.tour.core import Step

    assert file_stem(2, Step(2, "Ünïcode & <i>title</i>: more", "", None)) == "step-02-unicode-i-title-i"
    assert file_stem(12, Step(12, "Café — naïve Zoë", "", None)) == "step-12-cafe-naive-zoe"
    assert file_stem(1, Step(1, "𝔘𝔫𝔦 👩‍🔬", "", None)) == "step-01-uni"
    assert file_stem(3, Step(3, "👩‍🔬 <>", "", None)) == "step-03"


def test_markdown_in_the_narrative_is_escaped():
    assert md_html("a `<script>` **b & c**") == "a <code>&lt;script&gt;</code> <b>b &amp; c</b>"
    assert md_html("`` a`b ``") == "<code>a`b</code>"


def test_the_command_writes_the_handout_without_a_warning(tmp_path):
    out = tmp_path / "tour.html"
    done = subprocess.run([sys.executable, "-m", "attnlab.cli.main", "handout", "--out", str(out), "--paper",
                           "letter"], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)"]  # no warning at all
    doc = out.read_text(encoding="utf-8")
    assert sorted(embedded_figures(doc)) == list(range(1, N + 1)) and "size: letter" in doc


def test_a_tour_of_lecturers_views_writes_its_handout_without_a_warning(tmp_path):
    """Each lecturer's view runs its page (AppTest, which re-reads Streamlit's config and its log level): still not one
    warning, from the pages or from a built-in step after them ("No runtime found", "Session state does not
    function")."""
    tour, out = tmp_path / "mine.json", tmp_path / "tour.html"
    tour.write_text(json.dumps({"title": "Mine", "steps": [
        {"page": "heatmaps", "state": {"model": "lecture-decoder", "layer": "1", "head": "2"}, "title": "Up close"},
        {"page": "masks", "state": {"model": "lecture-decoder"}, "title": "Masks"},
        {"builtin": "kv-cache", "page": "kv-cache", "title": "KV cache"}]}))  # the app's loaders after a page's run
    done = subprocess.run([sys.executable, "-m", "attnlab.cli.main", "handout", "--tour", str(tour), "--out", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "STREAMLIT_LOGGER_LEVEL"} | {
                              "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)"]
    assert sorted(embedded_figures(out.read_text(encoding="utf-8"))) == [1, 2, 3]


@pytest.mark.parametrize("args, line", [
    (["--out", "{tmp}/no/tour.html"], "no folder"),
    (["--tour", "{tmp}/missing.json"], "cannot read the tour file"),
    (["--tour", "{tmp}/bad.json"], "bad.json: step 1: unknown page 'nowhere'"),
    (["--paper", "a3"], "invalid choice: 'a3'"),
])
def test_the_command_refuses_bad_arguments_in_one_line(args, line, tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"steps": [{"page": "nowhere", "title": "x"}]}')
    assert main(["handout", *[a.format(tmp=tmp_path) for a in args]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and line in err[-1] and "Traceback" not in "".join(err)


def test_the_command_takes_a_lecturers_tour_file(tmp_path):
    tour = tmp_path / "mine.json"
    tour.write_text(json.dumps({"title": "My class", "steps": [
        {"builtin": "masks", "page": "step-by-step", "title": "Masks first"},
        {"page": "heatmaps", "state": {"model": "lecture-decoder", "layer": 1, "head": 2}, "title": "Up close",
         "text": "Head **1.2** & the previous token."}]}))
    out = tmp_path / "mine.html"
    assert main(["handout", "--tour", str(tour), "--out", str(out)]) == 0
    doc = out.read_text(encoding="utf-8")
    assert "<h1>My class</h1>" in doc and "<h2>Step 2 of 2: Up close</h2>" in doc
    assert "Head <b>1.2</b> &amp; the previous token." in doc
    figs = embedded_figures(doc)
    assert sorted(figs) == [1, 2] and figs[2]["data"][0]["type"] == "heatmap"  # the Heatmaps page's mosaic


@pytest.mark.e2e
def test_every_steps_figure_as_png_and_svg_at_projector_size(built):
    if available():
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail(available())
        pytest.skip(available())
    from PIL import Image

    pairs = built[0][:3]
    with zipfile.ZipFile(io.BytesIO(images_zip(pairs))) as z:
        names = z.namelist()
        assert names == [f"{file_stem(n, s)}.{f}" for n, (s, _) in enumerate(pairs, 1) for f in ("png", "svg")]
        assert names[0] == "step-01-why-attention.png"
        for name in names:
            data = z.read(name)
            if name.endswith(".png"):
                assert Image.open(io.BytesIO(data)).size == (1024, 768)
            else:
                assert data.startswith(b"<svg") and b'width="1024"' in data and b'height="768"' in data
                assert not PLACEHOLDER.search(data.decode())


@pytest.mark.e2e
def test_the_pdf_has_every_steps_title(built, tmp_path):
    if not chromium():
        if os.environ.get("E2E_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium not found")
        pytest.skip("chromium not found")
    pdf = print_pdf(built[1], tmp_path / "tour.pdf")
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    if shutil.which("pdftotext"):
        text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                                       check=True).stdout.split())
        for step in STEPS:
            assert " ".join(f"Step {step.topic} of {N}: {step.title}".split()) in text, step.title
    else:  # one page per step at least (each section breaks the page)
        assert len(re.findall(rb"/Type\s*/Page[^s]", data)) >= N


def test_figures_fit_their_titles_to_the_handouts_narrowest_paper():
    """app/figures/style.PRINT_PX is the width a handout draws a figure at on its narrower paper."""
    from attnlab.app.figures.style import PRINT_PX
    from attnlab.app.tour.handout import PAPERS, figure_width

    assert PRINT_PX == min(figure_width(p) for p in PAPERS) == 703
