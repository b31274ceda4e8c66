"""Integrated gradients and input × gradient of inputs with a padding mask or token types: the shared passes of
embed_path.along_paths carry each row's own masks and token types (a row without any reads the model's default), so
the logit is the model's own on that input and a key no query may see gets no attribution."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.attributions import (
    input_x_gradient,
    integrated_gradients,
    integrated_gradients_many,
)

from tests.analysis.test_relevance import tiny


def _masked(inp, field: str, hidden: int):
    """inp with its last `hidden` tokens (target, or source for src_mask) hidden by a padding mask [1, n]."""
    n = (inp.src_ids if field == "src_mask" else inp.ids).shape[1]
    keep = torch.ones(1, n, dtype=torch.bool)
    keep[0, n - hidden:] = False
    return replace(inp, **{field: keep})


def _logit(lm, inp, pos, tid) -> float:
    return float(lm.forward(inp, records=False).logits[0, pos, tid])


@pytest.mark.parametrize("arch, field", [("encoder", "attention_mask"), ("encdec", "src_mask")])
def test_a_padding_mask_is_kept_alone_and_in_shared_passes(arch, field):
    lm = tiny(arch, 2)
    enc = (lambda t, s: lm.encode(t, s)) if arch == "encdec" else (lambda t, s: lm.encode(t))
    masked, plain = _masked(enc("the cat sat", "uvw st"), field, 3), enc("the dog ran", "abc de")  # same lengths
    pos, tid = 2, 7
    want = _logit(lm, masked, pos, tid)
    assert abs(want - _logit(lm, replace(masked, **{field: None}), pos, tid)) > 0.1  # the mask matters here
    one = integrated_gradients(lm, masked, pos, tid, steps=16)
    many = integrated_gradients_many(lm, [(plain, pos, tid), (masked, pos, tid)], steps=16)
    ixg = input_x_gradient(lm, masked, pos, tid)  # a backward through the masked softmax
    side = "source_row" if field == "src_mask" else "row"
    for a in (one, many[1], ixg):
        assert a.logit == pytest.approx(want, abs=1e-9)
        assert getattr(a, side)[-3:].tolist() == [0.0] * 3  # no query sees the hidden keys
    np.testing.assert_allclose(many[1].row, one.row, atol=1e-9, rtol=0)
    assert many[0].logit == pytest.approx(_logit(lm, plain, pos, tid), abs=1e-9)
    assert np.abs(getattr(one, side)[:-3]).sum() > 1e-3


def test_token_types_of_each_row_in_a_shared_pass():
    lm = tiny("encoder", 2, type_vocab_size=2)
    pair = replace(lm.encode("wxyz"), type_ids=torch.tensor([[0, 0, 0, 1, 1, 1]]))  # [1, 6]: a sentence pair
    single = lm.encode("abcd")  # no token types: type 0 everywhere
    for jobs in ([(single, 2, 5), (pair, 2, 5)], [(pair, 2, 5), (single, 2, 5)]):  # either one first in the pass
        many = integrated_gradients_many(lm, jobs, steps=8)
        for a, (inp, pos, tid) in zip(many, jobs):
            one = integrated_gradients(lm, inp, pos, tid, steps=8)
            assert a.logit == pytest.approx(_logit(lm, inp, pos, tid), abs=1e-9) == one.logit
            np.testing.assert_allclose(a.row, one.row, atol=1e-9, rtol=0)
    assert abs(_logit(lm, pair, 2, 5) - _logit(lm, replace(pair, type_ids=None), 2, 5)) > 0.1
