"""attnlab.analysis.attention.stepwise.neuron_view: one real score dimension by dimension, against the record's own numbers."""

import numpy as np
import torch
from attnlab.analysis.attention.stepwise import neuron_view
from attnlab.model.config import ModelConfig
from attnlab.model.loaded import LoadedModel
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model


def test_sum_scale_and_weight_are_the_records_own(dec):
    rec = dec.run("The cat sat on the mat.")["blocks.1.attn"]
    nv = neuron_view(rec, 2, 7, 3)
    assert nv["d_head"] == 16 and nv["q"].shape == nv["k"].shape == nv["product"].shape == (16,)
    np.testing.assert_array_equal(nv["q"], rec.q[0, 2, 7])
    np.testing.assert_array_equal(nv["k"], rec.k[0, 2, 3])
    np.testing.assert_allclose(nv["product"], rec.q[0, 2, 7].astype(np.float64) * rec.k[0, 2, 3], rtol=0, atol=0)
    assert abs(nv["raw"] - float(rec.raw_qk(2)[7, 3])) <= 1e-6
    assert nv["raw"] == nv["product"].sum() and abs(nv["recorded_raw"] - float(rec.raw_qk(2)[7, 3])) <= 1e-7
    assert nv["scale"] == rec.scale == 0.25 and nv["bias"] == 0.0  # 1/√16, learned positions: no bias
    assert abs(nv["scaled"] - float(rec.scores(2)[7, 3])) <= 1e-6
    assert nv["weight"] == float(rec.pattern(2)[7, 3]) and not nv["masked"]


def test_a_masked_key_has_weight_zero(dec):
    rec = dec.run("abcdef")["blocks.0.attn"]
    nv = neuron_view(rec, 0, 2, 5)  # causal: query 2 may not see key 5
    assert nv["masked"] and nv["weight"] == 0.0 and float(rec.pattern(0)[2, 5]) == 0.0
    assert abs(nv["raw"] - float(rec.raw_qk(0)[2, 5])) <= 1e-6  # the raw score exists all the same


def test_alibi_bias_enters_the_scaled_score():
    cfg = ModelConfig(arch="decoder", positional="alibi", vocab_size=260, d_model=32, n_heads=4, n_layers=1)
    torch.manual_seed(0)
    lm = LoadedModel("alibi", build_model(cfg).eval(), ByteTokenizer(), cfg, "random")
    rec = lm.run("abcdefg")["blocks.0.attn"]
    nv = neuron_view(rec, 1, 6, 2)
    assert nv["bias"] == float(rec.bias[1, 6, 2]) and nv["bias"] < 0  # −m₁·|6 − 2|
    assert abs(nv["scaled"] - float(rec.scores(1)[6, 2])) <= 1e-6
    assert abs(nv["raw"] - float(rec.raw_qk(1)[6, 2])) <= 1e-6 and nv["weight"] == float(rec.pattern(1)[6, 2])
