"""Cached ≡ uncached for decoder and encoder–decoder, chunked steps with a bottom-right mask."""

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.kv_cache import chunks, stitch
from attnlab.model.cache import KVCache
from attnlab.model.generate import generate
from attnlab.model.hooks import capture

from tests.model.helpers import tiny, tokens


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "alibi", "none"])
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_decoder_cached_equals_uncached(pos, backend):
    m = tiny(positional=pos, qk_norm=pos == "rope")
    full, steps, cache = _cached_vs_full(m, backend)
    assert len(cache) == 13
    _check_steps(full, steps)


@pytest.mark.parametrize("n_kv", [8, 4, 2, 1], ids=lambda n: f"kv{n}")
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_gqa_cached_equals_uncached_and_cache_holds_kv_heads(n_kv, backend):
    m = tiny(positional="rope", n_heads=8, n_kv_heads=n_kv, sliding_window=5 if n_kv == 2 else None)
    full, steps, cache = _cached_vs_full(m, backend)
    k, v = cache.self_kv["blocks.0.attn"]
    assert k.shape == v.shape == (1, n_kv, 13, 4), "the cache stores k/v heads only, not repeated"
    _check_steps(full, steps)


def _cached_vs_full(m, backend: str):
    """(full capture, stepped capture, cache) of 13 tokens run whole and in chunks; every chunk's logits equal
    the full run's rows within 1e-5."""
    x = tokens(13)
    with capture() as full:
        ref = m(x, backend=backend).logits
    cache = KVCache()
    with capture() as steps:
        for a, b in chunks(13):
            out = m(x[:, a:b], cache=cache, backend=backend).logits
            assert (out - ref[:, a:b]).abs().max() <= 1e-5
    return full, steps, cache


def _check_steps(full, steps):
    for site in full.sites:
        recs = steps.steps(site)
        assert [r.q_offset for r in recs] == [a for a, _ in chunks(13)]
        np.testing.assert_allclose(stitch(recs, 13), full[site].pattern(), atol=1e-5)


def test_chunked_step_uses_bottom_right_mask():
    m = tiny()
    x = tokens(8)
    cache = KVCache()
    m(x[:, :5], cache=cache, backend="sdpa")
    with capture() as cap:
        m(x[:, 5:8], cache=cache, backend="sdpa")
    mask = cap["blocks.0.attn"].mask_for()
    assert mask.shape == (3, 8)
    assert mask.tolist() == [[True] * 6 + [False] * 2, [True] * 7 + [False], [True] * 8]


def test_earlier_rows_never_change_as_tokens_arrive():
    m = tiny()
    x = tokens(10)
    with capture() as short:
        m(x[:, :6])
    with capture() as long:
        m(x)
    np.testing.assert_allclose(long["blocks.1.attn"].pattern()[:, :6, :6], short["blocks.1.attn"].pattern(), atol=1e-6)


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_encdec_cached_equals_uncached_and_cross_kv_computed_once(backend):
    m = tiny("encdec", positional="rope")
    src, tgt = tokens(7, seed=4), tokens(9, seed=5)
    ref = m(src, tgt, backend=backend).logits
    memory = m.encode(src, backend=backend)
    cache = KVCache()
    with capture(names="*cross_attn.hook_k") as cap:
        for a, b in chunks(9):
            out = m.decode(tgt[:, a:b], memory, cache=cache, backend=backend).logits
            assert (out - ref[:, a:b]).abs().max() <= 1e-5
    ks = cap.tensors["decoder.blocks.0.cross_attn.hook_k"]
    assert len(ks) == len(chunks(9)) and all(k.data_ptr() == ks[0].data_ptr() for k in ks), "cross-attention K/V come from the cache after the first step"
    assert set(cache.cross) == {"decoder.blocks.0.cross_attn", "decoder.blocks.1.cross_attn"}


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_greedy_ids_identical_with_and_without_cache(arch):
    m = tiny(arch, positional="alibi")
    src = tokens(6, seed=8) if arch == "encdec" else None
    prompt = tokens(3, seed=9)
    a = generate(m, prompt, 25, use_cache=True, src=src, backend="sdpa")
    b = generate(m, prompt, 25, use_cache=False, src=src, backend="eager")
    assert a.shape == (1, 28) and torch.equal(a, b)


def test_sampling_is_seeded_and_top_k_restricts():
    m = tiny()
    prompt = tokens(3)
    a = generate(m, prompt, 15, temperature=1.0, seed=7)
    b = generate(m, prompt, 15, temperature=1.0, seed=7)
    c = generate(m, prompt, 15, temperature=1.0, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # top_k=1 is greedy whatever the temperature
    assert torch.equal(generate(m, prompt, 10, temperature=2.0, top_k=1, seed=3), generate(m, prompt, 10))
    # stops at the context
    assert generate(m, tokens(60), 20).shape[1] == 64


def test_cache_rejects_non_causal_masks_after_the_first_step():
    m = tiny()
    cache = KVCache()
    m(tokens(4), cache=cache)
    with pytest.raises(ValueError, match="causal"):
        m(tokens(1), cache=cache, mask="bidirectional")


@pytest.mark.parametrize("kw, words", [(dict(temperature=float("nan")), "temperature must be a finite number"),
                                       (dict(temperature=-1.0), "temperature must be a finite number"),
                                       (dict(temperature=float("inf")), "temperature must be a finite number"),
                                       (dict(temperature=1.0, top_k=0), "top_k must be ≥ 1")])
def test_a_temperature_or_top_k_that_means_nothing_is_refused(kw, words):
    """NaN or a negative temperature used to mean greedy without a word, top_k 0 a sampling over no token."""
    with pytest.raises(ValueError, match=words):
        generate(tiny(), tokens(3), 5, **kw)
