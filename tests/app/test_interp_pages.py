"""The Logit lens and Activation patching pages with AppTest: the charts carry the numbers analysis computes,
the measured notes show on their examples, labels are escaped, bad input is one message."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.probes.dla import direct_logit_attribution
from attnlab.analysis.probes.lens import logit_lens
from attnlab.analysis.probes.patching import activation_patching
from attnlab.app.interp_examples import RETRIEVAL
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, titled, z_of


@pytest.fixture(scope="module")
def lm():
    return load("lecture-decoder")


def test_lens_page_on_the_retrieval_story(lm):
    at = open_page("lens", model="lecture-decoder", preset="decoder-retrieval-2")
    ok(at)
    assert at.session_state["text"] == RETRIEVAL.clean
    lens = logit_lens(lm, RETRIEVAL.clean, "rabbit")
    grid = titled(at, "top-1 token read from the stream")
    np.testing.assert_allclose(z_of(grid["data"][0]), lens.top_probs[:, :, 0], atol=1e-6)
    assert list(grid["layout"]["yaxis"]["ticktext"]) == ["embed", "L0", "L1", "L2", "L3"]
    assert grid["data"][0]["text"][-1][-1] == "rabbit"
    curve = titled(at, "the answer's probability after each layer")
    np.testing.assert_allclose(arr(curve["data"][0]["y"]), lens.answer_probs[:, -1], atol=1e-6)
    d = direct_logit_attribution(lm, RETRIEVAL.clean, "rabbit")
    dla = titled(at, "direct share of logit(rabbit)")
    np.testing.assert_allclose(z_of(dla["data"][0]), np.concatenate([d.heads, d.mlps[:, None]], 1), atol=1e-6)
    assert list(dla["layout"]["xaxis"]["ticktext"])[-1] == "MLP"
    assert any(f"L3 {lens.answer_probs[-1, -1]:.3f}" in i.value and "it is the top token from L3 on" in i.value
               for i in at.info)  # the note, written from this measurement


def test_lens_page_bad_answer_is_one_message():
    at = open_page("lens", model="lecture-decoder", preset="decoder-retrieval-2")
    at.text_input(key=[w.key for w in at.text_input if w.key.startswith("lens_answer")][0]).set_value(
        "rabbit turtle").run()
    assert not at.exception and len(at.error) == 1 and "2 tokens" in at.error[0].value


def test_patching_page_retrieval_example(lm):
    at = open_page("patching", model="lecture-decoder", pt_example="retrieval", pt_layer=1)
    ok(at)
    p = activation_patching(lm, RETRIEVAL.clean, RETRIEVAL.corrupt, "rabbit", "turtle")
    resid = titled(at, "residual stream entering each layer")
    np.testing.assert_allclose(z_of(resid["data"][0]), 100 * p.resid, atol=1e-3)
    assert resid["layout"]["xaxis"]["ticktext"][31] == "31 garo"
    heads = titled(at, "each head's output, every position")
    np.testing.assert_allclose(z_of(heads["data"][0]), 100 * p.heads, atol=1e-3)
    hp = titled(at, "layer 1: each head's output at one position")
    np.testing.assert_allclose(z_of(hp["data"][0]), 100 * p.head_pos[1], atol=1e-3)
    assert any("restores 100.00 %" in m.value for m in at.markdown)
    assert any(f"{p.ld_corrupt:+.2f} with 'garo' swapped for 'hildo'" in i.value and
               "layer 1 head 0 restores 100 %, the most" in i.value for i in at.info)  # written from this measurement


def test_patching_page_own_prompts_unequal_lengths_is_one_message():
    at = open_page("patching", model="lecture-decoder", preset="decoder-retrieval-2", pt_example="own")
    ok(at)
    at.text_input(key="pt_corrupt").set_value(RETRIEVAL.corrupt + " x")
    at.text_input(key="pt_answer").set_value("rabbit")
    at.text_input(key="pt_wrong").set_value("turtle").run()
    assert not at.exception and len(at.error) == 1 and "equal lengths" in at.error[0].value


def test_token_labels_are_escaped():
    at = open_page("patching", model="random-decoder", pt_example="own", text="<b>a</b>")
    at.text_input(key="pt_corrupt").set_value("<b>c</b>")
    at.text_input(key="pt_answer").set_value("x")
    at.text_input(key="pt_wrong").set_value("y").run()
    ok(at)
    ticks = titled(at, "residual stream entering each layer")["layout"]["xaxis"]["ticktext"]
    assert "1 &lt;" in ticks and not any("<" in t for t in ticks)


def test_lens_page_on_an_encoder_decoder():
    at = open_page("lens", model="random-encdec", text="ab", src="hello")
    ok(at)
    grid = titled(at, "top-1 token read from the stream")
    assert list(grid["layout"]["yaxis"]["ticktext"]) == ["embed", "L0", "L1"]  # the decoder's stream
