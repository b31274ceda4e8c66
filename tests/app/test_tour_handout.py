"""The tour's handout: one HTML file that needs no network (plotly.js inside, every step's title, narrative,
numbers and figure JSON), written by `attnlab handout`, and its PDF printed by chromium with all seventeen
steps' titles in it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import plotly
import plotly.io as pio
import pytest
from attnlab.app.tour import STEPS
from attnlab.app.tour.handout import chromium, embedded_figures, handout_html, md_html, print_pdf, views
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
        assert figs[step.topic]["data"] == json.loads(pio.to_json(view.fig))["data"]  # arrays included
        for k, v in view.numbers.items():
            assert f"<td>{k}</td>" in doc and (f"{v:.4g}" in doc if isinstance(v, float) else True)
    assert doc.count("Plotly.newPlot(") == N


def test_the_handout_needs_no_network(built):
    _, doc = built
    assert f"plotly.js v{plotly.offline.get_plotlyjs_version()}" in doc and plotly.offline.get_plotlyjs() in doc
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=[\"']?(https?:)?//", doc)
    assert len(re.findall(r"<script>", doc)) == N + 1  # plotly.js once, then one drawing script per step


def test_markdown_in_the_narrative_is_escaped():
    assert md_html("a `<script>` **b & c**") == "a <code>&lt;script&gt;</code> <b>b &amp; c</b>"
    assert md_html("`` a`b ``") == "<code>a`b</code>"


def test_the_command_writes_the_handout_and_rejects_a_missing_folder(tmp_path, capsys):
    out = tmp_path / "tour.html"
    assert main(["handout", "--out", str(out)]) == 0
    assert sorted(embedded_figures(out.read_text(encoding="utf-8"))) == list(range(1, N + 1))
    assert main(["handout", "--out", str(tmp_path / "no" / "tour.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("attnlab: error: no folder")


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
