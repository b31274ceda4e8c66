"""attnlab.analysis.probes.generation: generation traced step by step, greedy and sampled."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.analysis.probes import generation as G
from attnlab.model.inputs import Inputs

TEXT = "the cat sat on the mat"


def test_generation_trace_rows_equal_the_full_run(dec):
    inp = dec.encode(TEXT)
    tr = G.generation_trace(dec, inp, 5, backend="sdpa")
    T0 = inp.ids.shape[1]
    assert tr.prompt_len == T0 and tr.n_steps == 5 and len(tr.tokens) == T0 + 5
    assert tr.tokens[:T0] == inp.tokens
    # teacher-forcing the generated ids gives the same rows: row of step s = pattern row of position T0 + s − 1
    full = dec.forward(Inputs(torch.tensor([tr.ids[:-1]]), tr.tokens[:-1])).capture
    for site in tr.sites:
        want = full[site].pattern()[:, T0 - 1:, :]  # [H, steps, K]
        got = tr.rows[site].transpose(1, 0, 2)  # [H, steps, K]
        assert np.allclose(got, want, atol=1e-5)
        assert np.allclose(tr.rows[site].sum(-1), 1, atol=1e-5)
    assert tr.top_probs.shape == (5, G.TOP_K) and np.all(np.diff(tr.top_probs, axis=1) <= 1e-7)
    assert np.allclose(tr.chosen_prob, tr.top_probs[:, 0])  # greedy picks the most likely token


def test_generation_trace_sampling_is_seeded_and_top_k_bounded(dec):
    inp = dec.encode(TEXT)
    a = G.generation_trace(dec, inp, 6, temperature=1.5, top_k=3, seed=7)
    b = G.generation_trace(dec, inp, 6, temperature=1.5, top_k=3, seed=7)
    assert a.ids == b.ids
    assert np.allclose(a.top_probs[:, 3:], 0) and np.allclose(a.top_probs[:, :3].sum(1), 1, atol=1e-5)


def test_generation_trace_encdec_has_cross_rows(encdec):
    inp = encdec.encode("", "the cat sat .")
    tr = G.generation_trace(encdec, inp, 4)
    cross = [s for s in tr.sites if tr.kinds[s] == "cross"]
    assert cross and all(tr.rows[s].shape == (tr.n_steps, 4, len(inp.src_tokens)) for s in cross)
    assert not any(s.startswith("encoder.") for s in tr.sites)
