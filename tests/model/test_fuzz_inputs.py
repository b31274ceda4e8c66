"""Property-based fuzzing of text → tokens → capture for every loadable small model: either a
result whose invariants hold or a clear InputError — never anything else."""

import numpy as np
import pytest
from attnlab.model.inputs import InputError
from attnlab.model.registry import RANDOM, bundled_names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al

HOSTILE = [
    "<img src=x onerror=alert(1)>", "<b>bold</b> &amp; <script>alert(1)</script>", "שלום עולם مرحبا",
    "e\u0301\u0301\u0301 a\u200db\u200c", "👩‍👩‍👧‍👦 🏳️‍🌈", "a\x00b", "\x1b[31mred", "\ufeff\u202eevil", "   ",
    "x" * 100_000, "\n\n\t",
]
MODELS = [*RANDOM, *bundled_names()]


def _check(lm, text, src=None):
    try:
        run = lm.run(text, src, backend="sdpa")
    except InputError as e:
        msg = str(e)
        assert msg and "\n" not in msg and ("limit" in msg or "context" in msg or "empty" in msg
                                              or "control character" in msg or "source text" in msg
                                              or "no tokens" in msg)
        return
    for rec in run.records.values():
        p, m = rec.pattern(), rec.mask_for()
        live = m.any(-1)
        np.testing.assert_allclose(p.sum(-1)[:, live], 1, atol=1e-5)
        assert (p[:, ~m] == 0).all() and np.isfinite(p).all()
    assert len(run.tokens) == len(run.ids)
    assert all(isinstance(t, str) and t for t in run.tokens)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text(name, text):
    lm = al.load(name)
    _check(lm, text, "hello there" if lm.arch == "encdec" else None)
    if lm.arch == "encdec":
        _check(lm, "", text)


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=0, max_size=300))
def test_random_unicode(name, text):
    lm = _model(name)
    _check(lm, text, "a b c" if lm.arch == "encdec" else None)


_CACHE = {}


def _model(name):
    if name not in _CACHE:
        _CACHE[name] = al.load(name)
    return _CACHE[name]

