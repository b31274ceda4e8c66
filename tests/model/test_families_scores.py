"""Scores stay exact when a family changes them: records give q·kᵀ, each step (× scale, soft-cap, + bias) and
the pre-softmax score, the same whether eager materialised it or a fused run recomputes it; RoPE scaling gives
transformers' own frequencies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from attnlab.analysis.attention.scores import counterfactual_softmax, score_steps_table
from attnlab.analysis.machinery.positions import rope_frequencies
from attnlab.model.families.llama import llama_config
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.softmax import masked_softmax

from tests import family_grid as G
from tests.model.helpers import tiny, tokens
from tests.model.test_families_decoders import _LLAMA3, GRID

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    mt, cls, conf = GRID["gemma2-alternating-capped"]
    folder = G.make(tmp_path_factory.mktemp("g2") / "g2", mt, cls, **dict(conf, attn_logit_softcapping=0.5))
    G.assert_parity(G.parity(folder, backends=("eager", "sdpa")))  # a cap that binds: still at parity
    return load_hf_folder(folder)


def test_soft_capped_steps(gemma2):
    inputs = gemma2.encode(G.TEXT)
    eager = gemma2.forward(inputs, backend="eager").capture["blocks.1.attn"]
    fused = gemma2.forward(inputs, backend="sdpa").capture["blocks.1.attn"]
    assert fused.backend == "eager" and "soft-capped" in fused.kernel  # SDPA has no tanh cap: the eager math ran
    fused = dataclasses.replace(fused, pattern_full=None)  # as a record recomputed from q and k
    assert fused.lazy
    np.testing.assert_allclose(fused.pattern(), eager.pattern(), atol=1e-6)
    steps = fused.score_steps(2)
    assert [n.split(" ")[0] for n, _ in steps] == ["q·kᵀ", "×", "soft-cap"]
    qk, scaled, capped = (x for _, x in steps)
    np.testing.assert_allclose(scaled, qk * 12 ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(capped, 0.5 * np.tanh(scaled / 0.5), rtol=1e-5, atol=1e-6)
    assert np.abs(capped).max() < 0.5 < np.abs(scaled).max()  # the cap binds on this head
    np.testing.assert_allclose(capped, fused.scores(2), atol=1e-6)
    np.testing.assert_allclose(masked_softmax(capped, fused.mask_for()), eager.pattern(2), atol=1e-6)
    table = score_steps_table(steps, fused.mask_for())
    assert list(table["step"]) == [n for n, _ in steps] and table["max"].iloc[-1] < 0.5
    cf = counterfactual_softmax(qk, fused.scale, mask=fused.mask_for(), softcap=fused.softcap)
    np.testing.assert_allclose(cf.scaled, eager.pattern(2), atol=1e-6)


def test_alternating_window_in_the_records(gemma2):
    run = gemma2.forward(gemma2.encode(G.TEXT), backend="flash").capture
    T = run["blocks.0.attn"].q_len
    window = np.array([[0 <= q - k < 4 for k in range(T)] for q in range(T)])
    np.testing.assert_array_equal(run["blocks.0.attn"].mask_for(), window)  # sliding
    np.testing.assert_array_equal(run["blocks.1.attn"].mask_for(), np.tril(np.ones((T, T), bool)))  # full
    np.testing.assert_array_equal(run["blocks.2.attn"].mask_for(), window)


def test_alibi_steps_end_with_the_bias():
    model = tiny(positional="alibi")
    from attnlab.model.hooks import capture

    with capture() as cap, torch.no_grad():
        model(tokens(9))
    rec = cap["blocks.0.attn"]
    steps = rec.score_steps(1)
    assert [n.split(" ")[0] for n, _ in steps] == ["q·kᵀ", "×", "+"]
    np.testing.assert_allclose(steps[-1][1], rec.scores(1), atol=1e-6)


@pytest.mark.parametrize("rope", [_LLAMA3, {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.5},
                                  {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}])
def test_rope_frequencies_are_transformers(rope):
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    conf = dict(G._DEC, vocab_size=50, rope_parameters=rope)
    hf = transformers.LlamaConfig(**conf)
    kind = rope["rope_type"]
    theirs = (ROPE_INIT_FUNCTIONS[kind](hf, None)[0] if kind != "default" else
              1.0 / (rope["rope_theta"] ** (torch.arange(0, 4, 2).float() / 4)))
    f = rope_frequencies(llama_config({**conf, "model_type": "llama"}))
    np.testing.assert_array_equal(f["theta"], theirs.double().numpy())
    np.testing.assert_allclose(f["wavelength"], 2 * np.pi / theirs.double().numpy())
    if kind == "llama3":  # short wavelengths kept, long ones stretched 8×, one blended between
        assert f["stretch"][0] == 1.0 and f["stretch"][-1] == pytest.approx(8.0) and 1 < f["stretch"][1] < 8
    assert f["rotary_dims"] == (4 if kind == "default" else 8)


def test_long_input_and_neuron_view_read_the_cap(gemma2):
    from attnlab.analysis.attention.stepwise import neuron_view
    from attnlab.model.longinput import full_pattern, pattern_rows

    rec = gemma2.forward(gemma2.encode(G.TEXT), backend="eager").capture["blocks.1.attn"]
    lazy = dataclasses.replace(rec, pattern_full=None)
    np.testing.assert_allclose(pattern_rows(lazy, [1], 3, 9).numpy()[0], rec.pattern(1)[3:9], atol=1e-6)
    np.testing.assert_allclose(full_pattern(lazy), rec.pattern(), atol=1e-6)
    nv = neuron_view(lazy, 1, 9, 4)
    assert nv["softcap"] == 0.5 and abs(nv["scaled"] - nv["recorded_scaled"]) < 1e-5
