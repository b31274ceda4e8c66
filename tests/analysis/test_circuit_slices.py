"""Circuit discovery in slices: on_step after each batch of path points and each batch of circuit runs, 1 … total,
and the same circuit as without it."""

import numpy as np
import pytest
from attnlab.analysis.circuit import find
from attnlab.analysis.circuit.find import find_circuit
from attnlab.model.registry import load

from tests.analysis.interp_models import CORRUPT, STORY


@pytest.mark.parametrize("method", ["eap-ig", "eap", "eap-ig-act"])
def test_sliced_equals_unsliced(method, monkeypatch):
    monkeypatch.setattr(find, "CURVE_BATCH", 3)  # several batches of circuit runs
    lm = load("lecture-decoder")
    plain = find_circuit(lm, STORY, CORRUPT, "rabbit", "turtle", method=method)
    steps = []
    sliced = find_circuit(lm, STORY, CORRUPT, "rabbit", "turtle", method=method,
                          on_step=lambda d, t: steps.append((d, t)))
    assert np.array_equal(plain.scores, sliced.scores) and plain.curve == sliced.curve
    assert plain.faithfulness == sliced.faithfulness and plain.n_edges == sliced.n_edges
    # 10 path points (eap-ig) or 1 (eap): one batch of STEP_BATCH = 10; eap-ig-act: 9 groups × 2 points, one staircase
    grads = 1
    total = grads + -(-len(plain.curve) // 3)
    assert steps == [(d, total) for d in range(1, total + 1)] and total >= 4
