"""A captured forward copies nothing to the host and waits on nothing (tests/model/syncs.py) inside the model's
forward, whatever the backend; records stay tensors until read."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.registry import load

from tests.model.syncs import Syncs


@pytest.mark.parametrize("name", ["random-decoder", "random-encdec", "lecture-moe"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_a_captured_forward_reads_nothing_to_the_host(name, backend):
    lm = load(name)
    inp = lm.encode("the cat sat on the mat", "a source text" if lm.arch == "encdec" else None)
    with torch.no_grad(), hooks.capture() as cap, Syncs() as reads:
        lm.model.forward_inputs(inp, backend=backend)
    assert reads.seen == reads.allowed(lm.model), reads.seen
    rec = cap[cap.sites[0]]
    held = [rec.__dict__[f"_{f}"] for f in ("q", "k", "pattern_full")]
    assert all(t is None or torch.is_tensor(t) for t in held)  # still tensors: nothing copied yet
    assert rec.lazy == (backend != "eager")
    p = rec.pattern()  # read now: numpy, rows sum to 1
    assert isinstance(p, np.ndarray) and np.abs(p.sum(-1) - 1).max() < 1e-5
    for recs in cap.routers.values():  # a mixture of experts' routers: tensors until read
        assert torch.is_tensor(recs[0].__dict__["_logits"])
        assert recs[0].choice.dtype == np.int64 and np.allclose(recs[0].weights.sum(-1), 1, atol=1e-5)


def test_a_padding_mask_still_gives_zero_rows_for_queries_that_see_nothing():
    lm = load("random-decoder")
    inp = lm.encode("abcdef")
    T = inp.ids.shape[1]
    custom = torch.ones(T, T, dtype=torch.bool).tril()
    custom[2] = False  # query 2 sees no key
    rec = lm.forward(inp, backend="eager", mask=_spec(custom)).capture["blocks.0.attn"]
    p = rec.pattern()
    assert np.all(p[:, 2] == 0) and np.abs(np.delete(p, 2, axis=1).sum(-1) - 1).max() < 1e-5


def _spec(custom):
    from attnlab.model.masks import MaskSpec

    return MaskSpec("custom", custom=custom)
