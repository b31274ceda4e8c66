"""The faithfulness table in slices: on_step after each shared pass of integrated gradients and each example,
ending at (total, total), and the same report as without it."""

import pytest
from attnlab.analysis.faithfulness.benchmark import METHODS, faithfulness
from attnlab.analysis.probes.attributions import IG_STAGES
from attnlab.model.registry import load


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


@pytest.mark.parametrize("methods", [METHODS, ("last_layer", "rollout")])
def test_sliced_equals_unsliced(lecture, methods):
    plain = faithfulness(lecture, 6, 0, methods=methods, ablation=True)
    steps = []
    sliced = faithfulness(lecture, 6, 0, methods=methods, ablation=True, on_step=lambda d, t: steps.append((d, t)))
    assert sliced == plain
    n, ig = plain["n_examples"], "integrated_gradients" in methods
    total = n + (IG_STAGES if ig else 0)
    assert all(t == total for _, t in steps) and steps[-1] == (total, total)
    done = [d for d, _ in steps]
    assert done == sorted(set(done)) and done[-n:] == list(range(total - n + 1, total + 1))
    assert len(steps) == n + (len(steps) - n if ig else 0) and (not ig or 1 <= len(steps) - n <= IG_STAGES)
