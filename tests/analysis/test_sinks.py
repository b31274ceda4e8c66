"""analysis.probes.sinks and analysis.machinery.window_ppl: shares on the first token checked against the captured records, the norms
against explicit sums, perplexities against a cross-entropy of the model's own logits."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attnlab.analysis.machinery.window_ppl import (
    default_window,
    token_nll,
    window_perplexity,
    window_test,
    window_test_lacks,
    window_text,
)
from attnlab.analysis.probes.sinks import (
    SINK_SHARE,
    first_token_share,
    layer_norms,
    measure_sinks,
    sink_texts,
)
from attnlab.model.inputs import InputError
from attnlab.model.registry import load
from attnlab.model.streaming import window_mask

from tests.view.fixtures import make_view_model

TEXTS = ["the cat sat on the mat because the mat was warm", "a dog ran in the park and the cat watched"]


def test_first_token_share_leaves_row_zero_out():
    p = np.zeros((2, 3, 3))
    p[:, 0, 0] = 1.0
    p[0, 1] = [0.5, 0.5, 0]
    p[0, 2] = [0.2, 0.3, 0.5]
    p[1, 1] = [0, 1, 0]
    p[1, 2] = [1, 0, 0]
    np.testing.assert_allclose(first_token_share(p), [0.35, 0.5])
    with pytest.raises(InputError, match="two tokens"):
        first_token_share(np.ones((2, 1, 1)))


def test_shares_are_the_records_weights_on_key_zero(decoder):
    r = measure_sinks(decoder, TEXTS)
    want = np.mean([decoder.run(t).matrices("self")[:, :, 1:, 0].astype(np.float64).mean(-1) for t in TEXTS], axis=0)
    assert r.share.shape == (2, 4) and r.n_texts == 2
    assert r.tokens == sum(len(decoder.encode(t).tokens) for t in TEXTS)
    np.testing.assert_allclose(r.share, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r.per_layer, want.mean(1), atol=1e-6)
    heads = [(h["layer"], h["head"]) for h in r.sink_heads]
    assert heads == [(int(i), int(h)) for i, h in zip(*np.nonzero(want >= SINK_SHARE))]
    np.testing.assert_array_equal(r.sink_rate, (want >= SINK_SHARE).mean(1))
    j = r.to_json()
    assert j["per_layer"] == r.per_layer.tolist() and set(j["norms"]) == {f"{n}_{w}" for n in ("key", "value", "out", "resid")
                                                                          for w in ("first", "rest")}


def test_key_norms_match_the_records_keys(decoder):
    r = measure_sinks(decoder, TEXTS[:1])
    run = decoder.run(TEXTS[0])
    k = np.linalg.norm(np.stack([run[s].k[0] for s in run.sites("self")]), axis=-1)  # [L, Hkv, T]
    np.testing.assert_allclose(r.norms["key_first"], k[:, :, 0].mean(1), rtol=1e-5)  # [L]
    np.testing.assert_allclose(r.norms["key_rest"], k[:, :, 1:].mean((1, 2)), rtol=1e-5)


def test_layer_norms_are_the_explicit_sums():
    g = torch.Generator().manual_seed(0)
    Hkv, H, T, d = 2, 4, 5, 3
    k, v = torch.randn(Hkv, T, d, generator=g, dtype=torch.float64), torch.randn(Hkv, T, d, generator=g, dtype=torch.float64)
    a = torch.rand(H, T, T, generator=g, dtype=torch.float64).tril()
    a = a / a.sum(-1, keepdim=True)
    z = torch.einsum("hqk,hkd->hqd", a, v.repeat_interleave(2, 0))  # [H, T, d]: query head h reads k/v head h // 2
    x = torch.randn(T, 7, generator=g, dtype=torch.float64)
    n = layer_norms(k, v, z, a, x)
    out_first = np.mean([float(a[h, i, 0] * v[h // 2, 0].norm()) for h in range(H) for i in range(1, T)])
    out_rest = np.mean([float(sum(a[h, i, j] * v[h // 2, j] for j in range(1, T)).norm()) for h in range(H)
                        for i in range(1, T)])
    assert float(n["out_first"]) == pytest.approx(out_first, abs=1e-12)
    assert float(n["out_rest"]) == pytest.approx(out_rest, abs=1e-12)
    assert float(n["value_first"]) == pytest.approx(float(v[:, 0].norm(dim=-1).mean()), abs=1e-12)
    assert float(n["resid_rest"]) == pytest.approx(float(x[1:].norm(dim=-1).mean()), abs=1e-12)


def test_lecture_texts_and_refusals(encdec):
    lm = load("lecture-decoder")
    assert sink_texts(lm)[0].startswith("alex has a friend")  # its lecture samples, in its own vocabulary
    assert default_window(lm) == 24  # a quarter of its 96-token context
    assert len(lm.encode(window_text(lm)).tokens) == 96
    with pytest.raises(InputError, match="encoder–decoder"):
        measure_sinks(encdec, TEXTS)
    assert "next token" in window_test_lacks(load("random-encoder"))


def test_the_window_test_refuses_a_vision_model_in_one_line():
    """window_test cut its text with the model's tokenizer first: a ViT (no tokenizer) raised AttributeError."""
    with pytest.raises(InputError, match="^lecture-vit does not predict the next token"):
        window_test(load("lecture-vit"))


def test_a_view_measures_shares_and_says_what_it_lacks(tmp_path):
    lm = load(str(make_view_model("gptj", tmp_path / "gptj")))
    r = measure_sinks(lm, TEXTS)
    want = np.mean([lm.run(t).matrices("self")[:, :, 1:, 0].astype(np.float64).mean(-1) for t in TEXTS], axis=0)
    np.testing.assert_allclose(r.share, want, atol=1e-6)
    assert r.norms is None and "transformers view" in r.note and r.to_json()["norms"] is None
    assert "transformers view" in window_test_lacks(lm) and "mask" in window_test_lacks(lm)


def test_window_perplexities(decoder):
    text = "the cat sat on the mat because the mat was warm and the dog slept by the door all day"
    ids = decoder.encode(text).ids
    with torch.no_grad():
        logits = decoder.model(ids).logits[0]  # [T, V]
    full = math.exp(float(F.cross_entropy(logits[:-1].double(), ids[0, 1:])))
    r = window_perplexity(decoder, text, window=8, sinks=4)
    assert r.tokens == ids.shape[1] and r.window == 8 and r.sinks == 4
    assert r.full == pytest.approx(full, rel=1e-6)
    assert r.with_sinks_cache_positions is None  # learned positions: no cache slots to move the sinks to
    assert r.with_sinks != pytest.approx(r.full, rel=1e-6) and r.without_sinks != pytest.approx(r.with_sinks, rel=1e-6)
    assert set(r.after_window) == {"full", "with_sinks", "without_sinks", "with_sinks_cache_positions"}
    inp = decoder.encode(text)
    assert token_nll(decoder, inp, window_mask(ids.shape[1], 4)).tolist() == pytest.approx(  # a window over every row
        token_nll(decoder, inp).tolist(), abs=1e-6)
    with pytest.raises(InputError, match="window test needs more than"):
        window_perplexity(decoder, "short text", window=8)


def test_cache_positions_run_on_a_rope_model():
    lm = load("random-long-decoder")
    r = window_perplexity(lm, "the cat sat on the mat because the mat was warm and the dog slept", window=8, sinks=4)
    assert r.with_sinks_cache_positions is not None and r.with_sinks_cache_positions != pytest.approx(r.with_sinks,
                                                                                                       rel=1e-9)
