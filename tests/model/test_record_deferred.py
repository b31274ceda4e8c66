"""A lazy capture copies nothing off the device during the forward: records hold q, k, the bias and the mask as
given (tensors, a deferred causal mask) and turn them into numpy on first read. What they read equals the eager
math to 1e-6, pickles torch-free, and the causal mask's windows equal the whole mask's."""

import pickle

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.record import AttentionRecord, CausalMask
from attnlab.model.transformer import build_model


def tiny(**kw):
    cfg = ModelConfig(**{**dict(vocab_size=53, d_model=32, n_heads=4, n_layers=2, max_len=64), **kw})
    torch.manual_seed(0)
    return build_model(cfg).eval()


def run(model, x, backend, **kw):
    with torch.no_grad(), hooks.capture() as cap:
        model(x, backend=backend, **kw)
    return [cap[s] for s in cap.sites]


X = torch.randint(0, 53, (1, 23), generator=torch.Generator().manual_seed(3))


@pytest.fixture
def host_calls(monkeypatch):
    """Counts Tensor.numpy / .cpu / .item / .tolist calls (each a device→host copy and a sync on a GPU)."""
    calls = []
    for name in ("numpy", "cpu", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _name=name, _f=original, **kw):
            calls.append(_name)
            return _f(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


@pytest.mark.parametrize("kw", [dict(), dict(n_kv_heads=2, positional="rope", norm_type="rmsnorm"),
                                dict(positional="alibi")])
def test_lazy_capture_copies_nothing_during_the_forward(kw, host_calls):
    model = tiny(**kw)
    records = run(model, X, "sdpa")
    assert host_calls == []  # the whole forward: no copy, no sync
    rec = records[1]
    assert isinstance(rec.__dict__["_q"], torch.Tensor) and isinstance(rec.__dict__["_k"], torch.Tensor)
    assert rec.has_mask and rec.lazy
    assert rec.causal == (kw.get("positional") != "alibi")  # ALiBi's explicit mask: a deferred copy instead
    assert rec.kv_head(3) == (3 // 2 if kw.get("n_kv_heads") else 3)
    q = rec.q  # the first read converts and keeps
    assert isinstance(q, np.ndarray) and q.dtype == np.float32 and q.shape == (1, 4, 23, 8)
    assert rec.q is q and isinstance(rec.__dict__["_q"], np.ndarray)
    assert host_calls  # the read did copy


@pytest.mark.parametrize("kw", [dict(), dict(n_kv_heads=2, positional="rope", norm_type="rmsnorm"),
                                dict(positional="alibi")])
def test_deferred_rows_equal_eager_rows(kw):
    model = tiny(**kw)
    lazy, eager = run(model, X, "sdpa"), run(model, X, "eager")
    for lr, er in zip(lazy, eager):
        assert lr.lazy and not er.lazy
        np.testing.assert_allclose(lr.pattern(), er.pattern(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(lr.pattern(head=2, window=(5, 17, 0, 23)), er.pattern(head=2)[5:17], atol=1e-6)
        np.testing.assert_array_equal(lr.mask, er.mask)
        np.testing.assert_allclose(lr.scores(), er.scores(), atol=1e-5, rtol=0)


def test_bfloat16_records_read_as_float32_of_the_same_values():
    model = tiny().to(torch.bfloat16)
    with torch.no_grad(), hooks.capture() as cap:
        model(X, backend="sdpa")
    rec = cap[cap.sites[0]]
    raw = rec.__dict__["_q"]
    assert raw.dtype == torch.bfloat16
    np.testing.assert_array_equal(rec.q, raw.float().numpy())


def test_a_padding_mask_is_copied_once_for_every_layer():
    model = tiny()
    x = torch.cat([X, X.flip(1)])  # [2, 23]
    pad = torch.ones(2, 23, dtype=torch.bool)
    pad[1, -4:] = False
    records = run(model, x, "sdpa", attention_mask=pad)
    assert not records[0].causal and records[0].has_mask
    assert records[0].mask is records[1].mask  # one copy, shared
    m = records[0].mask  # [B, q, k]
    assert m.shape == (2, 23, 23) and not m[1, :, -4:].any() and m[0].sum() == 23 * 24 // 2
    eager = run(model, x, "eager", attention_mask=pad)
    np.testing.assert_allclose(records[1].pattern(batch=1), eager[1].pattern(batch=1), atol=1e-6, rtol=0)


def test_pickled_records_hold_numpy_only():
    rec = run(tiny(n_kv_heads=2), X, "sdpa")[0]
    back = pickle.loads(pickle.dumps(rec))
    for name in ("q", "k", "mask"):
        assert isinstance(back.__dict__[f"_{name}"], np.ndarray)
    assert back.causal is False and back.has_mask  # a plain array now
    np.testing.assert_array_equal(back.pattern(), rec.pattern())
    assert back.bias is None and back.k.shape == (1, 2, 23, 8)


@pytest.mark.parametrize("window", [(0, 9, 0, 9), (3, 9, 2, 7), (5, 6, 0, 9), (0, 9, 8, 9)])
def test_causal_mask_windows_equal_the_whole_mask(window):
    m = CausalMask(9)
    q0, q1, k0, k1 = window
    np.testing.assert_array_equal(m.window(*window), np.tri(9, dtype=bool)[q0:q1, k0:k1])
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 2, 9, 4)).astype(np.float32), rng.standard_normal((1, 2, 9, 4)).astype(np.float32)
    deferred = AttentionRecord("a", "", 0, "self", "sdpa", "t", 0.5, 0, q, k, m)
    whole = AttentionRecord("a", "", 0, "self", "sdpa", "t", 0.5, 0, q, k, np.tri(9, dtype=bool)[None])
    np.testing.assert_array_equal(deferred.mask_for(window=window), whole.mask_for(window=window))
    np.testing.assert_array_equal(deferred.pattern(window=window), whole.pattern(window=window))
    assert deferred.causal and deferred.__dict__["_mask"] is m  # windows did not build the whole mask
    assert m._full is None
    np.testing.assert_array_equal(deferred.mask, whole.mask)


def test_a_record_without_a_mask_or_fields_given_as_numpy_is_unchanged():
    q = np.ones((1, 2, 3, 4), np.float32)
    rec = AttentionRecord("a", "", 0, "self", "eager", "t", 1.0, 0, q, q, None)
    assert rec.q is q and rec.mask is None and not rec.has_mask and not rec.causal and rec.bias is None
    with pytest.raises(TypeError):
        AttentionRecord("a", "", 0, "self", "eager", "t", 1.0, 0, q, q)  # mask is required
