"""One query row as vectors (analysis.probes.head_vectors): q·k/√d, the softmax and Σ α v written out give the model's
own output of the head (hook_z) and its pattern row, with positional bias and grouped-query heads too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.head_vectors import head_vectors
from attnlab.model.config import ModelConfig
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


@pytest.mark.parametrize("layer, head, query", [(0, 0, 5), (2, 0, 12), (3, 3, 0)])
def test_the_written_out_row_is_the_models_output(lecture, layer, head, query):
    inp = lecture.encode("the cat sat on the mat because the mat was warm .")
    hv = head_vectors(lecture, inp, f"blocks.{layer}.attn", head, query)
    assert list(hv.keys) == list(range(query + 1)) and hv.k.shape == hv.v.shape == (query + 1, 32)
    np.testing.assert_allclose(hv.scores, hv.scale * hv.k @ hv.q, atol=1e-12)
    assert hv.weights.sum() == pytest.approx(1.0) and hv.max_abs_vs_model < 1e-5
    row = lecture.capture(inp, backend="eager").records[f"blocks.{layer}.attn"].pattern(head)[query]  # [T]
    np.testing.assert_allclose(hv.weights, row[: query + 1], atol=1e-6)


@pytest.mark.parametrize("kw", [dict(positional="alibi"), dict(positional="rope", n_kv_heads=2)])
def test_bias_and_shared_kv_heads(kw):
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64, **kw)
    torch.manual_seed(5)
    lm = LoadedModel("tiny", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    hv = head_vectors(lm, lm.encode("q, k and v, one row"), "blocks.1.attn", 3, 9)
    assert hv.max_abs_vs_model < 1e-5 and len(hv.keys) == 10


def test_a_query_outside_the_text_is_refused_in_one_line(decoder):
    with pytest.raises(ValueError, match=r"^query 99 is outside the \d+ positions of blocks.0.attn$"):
        head_vectors(decoder, decoder.encode("a short text"), "blocks.0.attn", 0, 99)


def test_soft_capped_scores_are_the_models():
    """Gemma 2 caps the scaled scores (cap·tanh(s/cap)): the written-out row missed the cap (weights 0.38 off the
    model's pattern row, Σ α v 1.6 off hook_z)."""
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64, positional="rope",
                      attn_softcap=2.0)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4)  # scores well past the cap
    lm = LoadedModel("tiny", model, ByteTokenizer(add_bos=True), cfg, "random")
    inp = lm.encode("hello world, hello")
    hv = head_vectors(lm, inp, "blocks.1.attn", 2, 10)
    raw = hv.scale * hv.k @ hv.q
    assert np.abs(raw).max() > 2.0  # past the cap
    np.testing.assert_allclose(hv.scores, 2.0 * np.tanh(raw / 2.0), atol=1e-12)
    row = lm.capture(inp, backend="eager").records["blocks.1.attn"].pattern(2)[10]  # [T]
    np.testing.assert_allclose(hv.weights, row[:11], atol=1e-6)
    assert hv.max_abs_vs_model < 1e-5
