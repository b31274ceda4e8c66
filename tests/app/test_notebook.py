"""app/notebook.py: show() per view with real values, the same figures the pages draw (AppTest), no Streamlit
at import, to_html offline; and docs/notebook.ipynb executed headless (nbclient) with its figures checked."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from attnlab.analysis.attention.rollout import attention_rollout, cross_rollout
from attnlab.app.columns import column_px
from attnlab.app.figures.style import MAIN_PX, tick_labels
from attnlab.app.notebook import VIEWS, show, to_html
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page, titled, z_of

ROOT = Path(__file__).resolve().parents[2]
TEXT = "hello world"


@pytest.fixture(scope="module")
def run():
    return load("random-decoder").run(TEXT)


def nan_equal(a, b, atol=1e-6) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool((np.isnan(a) == np.isnan(b)).all()) and np.allclose(
        np.nan_to_num(a), np.nan_to_num(b), atol=atol)


def masked(pattern, mask):
    return np.where(mask, pattern, np.nan)


# -- show() per view, real values ------------------------------------------------------------------------------
def test_head_is_the_records_pattern(run):
    fig = show(run, "head", layer=0, head=1)
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    t = len(run.tokens)
    rec = run["blocks.0.attn"]
    assert z.shape == (t, t) and fig.layout.title.text == "layer 0, head 1"
    assert nan_equal(z, masked(rec.pattern(1), rec.mask_for()))  # NaN above the diagonal (causal)
    assert np.isnan(z[np.triu_indices(t, 1)]).all() and np.allclose(np.nansum(z, 1), 1, atol=1e-5)
    assert list(fig.layout.xaxis.ticktext) == tick_labels(run.tokens) == list(fig.layout.yaxis.ticktext)
    # the page's defaults: the last layer, head 0, the last token marked
    d = show(run, "head")
    assert d.layout.title.text == "layer 1, head 0" and d.layout.shapes[0].y0 == t - 1.5


def test_heads_mosaic_blocks_are_every_layer_and_head(run):
    fig = show(run, "heads")
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    meta, t = fig.layout.meta, len(run.tokens)
    gap = meta["gap"]
    assert (meta["layers"], meta["heads"]) == (2, 4) and len(fig.data) == 1
    for layer in range(2):
        rec = run[f"blocks.{layer}.attn"]
        for h in range(4):
            block = z[layer * (t + gap):layer * (t + gap) + t, h * (t + gap):h * (t + gap) + t]
            assert nan_equal(block, masked(rec.pattern(h), rec.mask_for()))
    assert fig.data[0].y[1] == f"layer 0 · 1 {tick_labels(run.tokens, 10)[1]}"
    fused = show(run, "heads", fuse="mean", kind="scores")
    assert fused.layout.meta["heads"] == 1 and "raw scores" in fused.layout.title.text


def test_rollout_is_attention_rollout_of_the_patterns(run):
    fig = show(run, "rollout")
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    expected = attention_rollout(run.matrices("self"))
    assert np.allclose(z, expected, atol=1e-6) and np.allclose(z.sum(1), 1, atol=1e-5)
    assert fig.layout.title.text == "rollout: row = output, column = input"
    other = np.asarray(show(run, "rollout", residual=0.0, fusion="max").data[0].z, dtype=np.float64)
    assert np.allclose(other, attention_rollout(run.matrices("self"), 0.0, "max"), atol=1e-6)


def test_tokens_rows_are_the_query_rows_head_mean(run):
    t = len(run.tokens)
    fig = show(run, "tokens", query=3)
    raw = np.asarray(fig.data[0].customdata, dtype=np.float64)  # [L, T]: the unscaled rows
    expected = np.stack([run[f"blocks.{i}.attn"].pattern()[:, 3].mean(0) for i in range(2)])
    assert raw.shape == (2, t) and np.allclose(raw, expected, atol=1e-6)
    assert list(fig.data[0].y) == ["layer 0", "layer 1"]
    assert list(fig.layout.xaxis.ticktext) == tick_labels(run.tokens, 12)
    assert fig.layout.title.text == "Where does token 3 (l) look? Head mean per layer"


def test_headview_lines_from_the_query(run):
    fig = show(run, "headview", layer=0, head=2, query=4)
    assert fig.layout.meta["query"] == 4 and fig.layout.meta["heads"] == [2]
    assert show(run, "headview", heads="all").layout.meta["heads"] == [0, 1, 2, 3]


def test_encoder_decoder_views():
    run = load("random-encdec").run("le chat", "the cat")
    t, s = len(run.tokens), len(run.src_tokens)
    cross = show(run, "rollout")  # the cross group: cross_rollout's source side [T, S]
    expected = cross_rollout(run.matrices("encoder"), run.matrices("decoder"), run.matrices("cross")).source
    assert np.allclose(np.asarray(cross.data[0].z, dtype=np.float64), expected, atol=1e-6)
    assert "source side" in cross.layout.title.text
    assert np.asarray(show(run, "head").data[0].z).shape == (t, s)
    assert np.asarray(show(run, "head", group="encoder").data[0].z).shape == (s, s)
    assert np.asarray(show(run, "rollout", group="decoder").data[0].z).shape == (t, t)
    for view in VIEWS:
        for group in run.groups():
            assert show(run, view, group=group).data


def test_bad_arguments(run):
    with pytest.raises(ValueError, match="unknown view"):
        show(run, "attention")
    with pytest.raises(ValueError, match="unknown group 'cross'"):
        show(run, "heads", group="cross")
    with pytest.raises(ValueError, match=r"layer 2 is outside 0\.\.1"):
        show(run, "head", layer=2)
    with pytest.raises(ValueError, match="head 4"):
        show(run, "head", head=4)
    with pytest.raises(TypeError, match="colour"):
        show(run, "head", colour="red")
    with pytest.raises(ValueError, match="unknown kind"):
        show(run, "heads", kind="weights")


def test_to_html_embeds_plotlyjs(run):
    html = to_html(show(run, "heads"))
    assert html.startswith("<!doctype html>") and len(html) > 3_000_000  # plotly.js itself, inline
    assert not re.search(r"<script[^>]*\ssrc=", html)  # nothing loaded from elsewhere (no CDN, no MathJax)
    assert "cdn.plot.ly/plotly-" not in html and "cdnjs" not in html


def test_no_streamlit_at_import_nor_for_show():
    """A fresh interpreter: importing app.notebook and drawing small figures loads no Streamlit; a matrix sent
    as a PNG (the one place a builder asks Streamlit for the theme) works without a runtime, silently."""
    code = ("import sys\nimport app.notebook as nb\nfrom model.registry import load\n"
            "assert 'streamlit' not in sys.modules\n"
            "run = load('random-decoder').run('hi there')\n"
            "[nb.show(run, v) for v in nb.VIEWS]\nassert 'streamlit' not in sys.modules\n"
            "big = load('random-long-decoder').run('abcdefghij' * 40)\n"
            "fig = nb.show(big, 'head')\nassert fig.data[0].type == 'image', fig.data[0].type\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                            "HOME": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    assert "ScriptRunContext" not in r.stderr


# -- the same figures as the pages ---------------------------------------------------------------------------------
def same_figure(page_spec: dict, fig) -> None:
    ours = json.loads(fig.to_json())
    assert page_spec["layout"]["title"]["text"] == ours["layout"]["title"]["text"]
    assert len(page_spec["data"]) == len(ours["data"])
    for a, b in zip(page_spec["data"], ours["data"]):
        assert a["type"] == b["type"]
        if a["type"] == "heatmap":
            assert nan_equal(z_of(a), z_of(b))
        for key in ("x", "y", "text", "hovertemplate"):
            assert a.get(key) == b.get(key), key
    for axis in ("xaxis", "yaxis"):
        assert page_spec["layout"][axis].get("ticktext") == ours["layout"][axis].get("ticktext")
    assert page_spec["layout"].get("meta") == ours["layout"].get("meta")


def test_same_figures_as_the_heatmaps_page(run):
    at = open_page("heatmaps", model="random-decoder", text=TEXT)
    ok(at)
    same_figure(titled(at, "self-attention"), show(run, "heads", width=MAIN_PX[False]))
    left, right = column_px([3, 2], False, "medium")  # the close-up and the head view side by side
    same_figure(titled(at, "layer 1, head 0"), show(run, "head", width=left))
    same_figure(titled(at, "Head view"), show(run, "headview", width=right))


def test_same_figures_as_the_rollout_and_explore_pages(run):
    at = open_page("rollout", model="random-decoder", text=TEXT)
    ok(at)
    same_figure(titled(at, "rollout: row = output"), show(run, "rollout"))
    at = open_page(None, model="random-decoder", text=TEXT)
    ok(at)
    same_figure(titled(at, "Where does token"), show(run, "tokens"))


# -- the notebook, executed headless ----------------------------------------------------------------------------
def execute_notebook(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    spec = tmp_path / "kernels" / "attnlab-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({  # the interpreter running the tests
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "attnlab tests", "language": "python",
        "env": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1"}}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb = nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
    nbclient.NotebookClient(nb, kernel_name="attnlab-test", timeout=120,
                            resources={"metadata": {"path": str(ROOT / "docs")}}).execute()
    return nb


def test_notebook_runs_and_shows_the_figures(tmp_path, monkeypatch):
    nb = execute_notebook(tmp_path, monkeypatch)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.text for o in outputs if o.output_type == "stream" and o.name == "stdout")
    assert "stderr" not in {o.get("name") for o in outputs if o.output_type == "stream"}  # no warnings either
    token_lists = [ast.literal_eval(line) for line in printed.splitlines() if line.startswith("[")]
    figs = [o.data["application/vnd.plotly.v1+json"] for o in outputs
            if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(token_lists) == 2 and len(figs) == 8
    lecture = load("lecture-decoder").run("the cat sat on the mat because it was warm")
    assert token_lists[0] == lecture.tokens
    for tokens, (heads, head, roll, rows), n_layers, n_heads in (
            (token_lists[0], figs[:4], 4, 4), (token_lists[1], figs[4:], 2, 4)):
        t = len(tokens)
        assert [f["data"][0]["type"] for f in (heads, head, roll, rows)] == ["heatmap"] * 4
        assert heads["layout"]["meta"]["layers"] == n_layers and heads["layout"]["meta"]["heads"] == n_heads
        assert z_of(heads["data"][0]).shape == tuple(heads["layout"]["meta"]["shape"])
        assert heads["data"][0]["y"][:t] == [f"layer 0 · {i} {lab}" for i, lab in enumerate(tick_labels(tokens, 10))]
        assert head["layout"]["title"]["text"] == "layer 0, head 1"
        z = z_of(head["data"][0])
        assert z.shape == (t, t) and np.isnan(z[np.triu_indices(t, 1)]).all()
        assert head["layout"]["xaxis"]["ticktext"] == tick_labels(tokens) == head["layout"]["yaxis"]["ticktext"]
        r = z_of(roll["data"][0])
        assert r.shape == (t, t) and np.allclose(r.sum(1), 1, atol=1e-5)
        assert roll["layout"]["xaxis"]["ticktext"] == tick_labels(tokens)
        assert z_of(rows["data"][0]).shape == (n_layers, t) and rows["layout"]["xaxis"]["ticktext"] == tick_labels(tokens, 12)
    # the lecture figures hold the real numbers
    rec = lecture["blocks.0.attn"]
    assert nan_equal(z_of(figs[1]["data"][0]), masked(rec.pattern(1), rec.mask_for()))
    assert np.allclose(z_of(figs[2]["data"][0]), attention_rollout(lecture.matrices("self")), atol=1e-6)
    # nothing from a CDN: no script tags, no CDN address, in any output (base64 figure data may spell "cdn";
    # an address has a dot or a scheme, which base64 has not)
    text = json.dumps([o for o in outputs]).lower()
    assert not re.search(r"cdn\.|https?://[^\s\"]*cdn", text) and "<script" not in text
    assert "plotly.js inline" in printed


def test_attributions_are_the_rollout_pages_rows():
    from attnlab.app.notebook import attributions

    lm = load("random-decoder")
    at = open_page("rollout", model="random-decoder", text=TEXT)
    ok(at)
    page = titled(at, "Which tokens matter for token")
    fig = attributions(lm, TEXT)
    assert list(fig.data[0].y) == list(page["data"][0]["y"])[:len(fig.data[0].y)] and len(fig.data[0].y) == 9
    np.testing.assert_allclose(np.asarray(fig.data[0].customdata, dtype=np.float64),
                               z_of({"z": page["data"][0]["customdata"]}), rtol=1e-4, atol=1e-6)


def test_attributions_of_an_encoder_decoder_are_the_rollout_pages_target_rows():
    """The context-mixing rows too: the decoder's self-attention of the last layer, as on the page."""
    from attnlab.analysis.probes.context_mixing import value_zeroing
    from attnlab.app.notebook import attributions

    lm = load("random-encdec")
    at = open_page("rollout", model="random-encdec", text="le chat noir", src="the black cat", query=1)
    ok(at)
    page = titled(at, "Which tokens matter for token")
    fig = attributions(lm, "le chat noir", query=1, src="the black cat")
    assert list(fig.data[0].y) == list(page["data"][0]["y"]) and "value zeroing" in fig.data[0].y
    ours = np.asarray(fig.data[0].customdata, dtype=np.float64)
    np.testing.assert_allclose(ours, z_of({"z": page["data"][0]["customdata"]}), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours[list(fig.data[0].y).index("value zeroing")],
                               value_zeroing(lm, lm.encode("le chat noir", "the black cat")).decoder[-1, 1], atol=1e-9)
