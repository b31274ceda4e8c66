"""attnlab.analysis.machinery.kv_cache and the KV-cache checks of analysis.machinery.checks: generation and stitched rows with and
without the cache, prefix stability, cache costs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery import kv_cache as K
from attnlab.analysis.machinery.checks import TOL_CACHE, check_greedy_cache, check_kv_cache, generation_steps
from attnlab.model.registry import load

TEXT = "the cat sat on the mat"


def test_cache_generation_and_stitching_agree(dec, encdec):
    for lm, inp in ((dec, dec.encode(TEXT)), (encdec, encdec.encode("the", "the cat sat ."))):
        rep = generation_steps(lm, inp, 6)
        assert rep["passed"] and len(rep["steps"]) == 6 and rep["max_abs_logits"] <= TOL_CACHE
        assert rep["cached"] == rep["uncached"]
        kv = check_kv_cache(lm, inp)
        assert kv.passed and [c.name for c in kv.checks] == ["cache_vs_no_cache_logits", "cache_vs_no_cache_pattern"]
        st = kv.detail
        T = inp.ids.shape[1]
        assert st["bounds"] == K.chunks(T) and st["max_abs_pattern"] == kv.checks[1].value
        for site in st["sites"].values():
            assert site["stitched"].shape == site["full"].shape and site["stitched"].shape[1] == T
            assert np.abs(site["stitched"] - site["full"]).max() <= TOL_CACHE


def test_prefix_stability_is_exact_for_causal_models(dec):
    ps = K.prefix_stability(dec, dec.encode(TEXT))
    assert ps["lengths"].tolist() == list(range(1, ps["T"] + 1))
    assert max(ps["rows"].max(), ps["keys"].max(), ps["values"].max()) <= TOL_CACHE
    with pytest.raises(ValueError, match="both ways"):
        enc = load("random-encoder")
        K.prefix_stability(enc, enc.encode(TEXT))


def test_cache_costs_quadratic_vs_linear():
    c = K.cache_costs(4, 3, 1, 1)
    assert c["uncached"].tolist() == [16, 16 + 25, 16 + 25 + 36]
    assert c["cached"].tolist() == [16, 16 + 5, 16 + 5 + 6]


def test_a_full_context_generates_nothing_the_check_passes_the_page_is_told(dec):
    """A prompt that fills the context: the greedy check compares zero tokens (nothing differs, as `attnlab check`
    always said); the KV-cache page's generation says why it has nothing to show."""
    inp = dec.encode("x" * (dec.cfg.max_len - 1))  # with [BOS]: exactly the context
    g = check_greedy_cache(dec, inp, 3)
    assert g.passed and g.checks[0].value == 0.0 and g.detail["steps"] == []
    with pytest.raises(ValueError, match="already fills the model's context"):
        generation_steps(dec, inp, 3)


def test_a_prompt_filling_the_context_here_names_that_context():
    """random-long-decoder reads 4,096 tokens on the CPU (32,768 on CUDA): a 4,096-token prompt leaves no room, and
    the KV-cache page and Generate said it filled a context of 32,768 tokens."""
    from dataclasses import replace

    from attnlab.analysis.probes.generation import generation_trace

    lm = load("random-long-decoder")
    inp = lm.encode("a b")
    inp = replace(inp, ids=torch.full((1, lm.context), int(inp.ids[0, -1])), tokens=inp.tokens[-1:] * lm.context)
    assert (lm.context, lm.cfg.max_len) == (4096, 32768)
    said = "the prompt already fills the model's context (4,096 tokens here); shorten it"
    with pytest.raises(ValueError) as a:
        generation_steps(lm, inp, 3)
    with pytest.raises(ValueError) as b:
        generation_trace(lm, inp, 3)
    assert str(a.value) == str(b.value) == said


def test_an_encoder_has_no_cache():
    enc = load("random-encoder")
    inp = enc.encode(TEXT)
    kv = check_kv_cache(enc, inp)
    assert [(c.name, c.value, c.passed) for c in kv.checks] == [
        ("cache_vs_no_cache_logits", None, True), ("cache_vs_no_cache_pattern", None, True)]
    assert check_greedy_cache(enc, inp).checks == []
    with pytest.raises(ValueError, match="no KV cache"):
        K.cached_chunks(enc, inp)
    with pytest.raises(ValueError, match="no KV cache"):
        generation_steps(enc, inp, 2)


def test_first_steps_of_the_greedy_check_equal_a_generation_of_that_length(dec, encdec):
    from attnlab.analysis.machinery.checks import GREEDY_TOKENS, first_steps

    for lm, inp in ((dec, dec.encode("The cat sat")), (encdec, encdec.encode("", "a b c"))):
        greedy = check_greedy_cache(lm, inp).detail
        for n in (1, 7, GREEDY_TOKENS):
            assert first_steps(greedy, n) == generation_steps(lm, inp, n)
    full = dec.encode("x" * (dec.cfg.max_len - 1))  # with [BOS]: the context is full, no step
    with pytest.raises(ValueError, match="fills the model's context"):
        first_steps(check_greedy_cache(dec, full).detail, 5)
    with pytest.raises(ValueError, match="encoder has no KV cache"):
        first_steps({}, 5)
