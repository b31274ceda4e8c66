"""Activation patching in slices: on_step is called after each block of each staircase, done = 1 … total
exactly, and the numbers are the same as the run without it, bit for bit."""

import numpy as np
import pytest
from attnlab.analysis.probes import patching
from attnlab.model.registry import load

from tests.analysis.interp_models import CORRUPT, STORY


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


def _same(a, b):
    assert a.ld_clean == b.ld_clean and a.ld_corrupt == b.ld_corrupt and a.all_restored == b.all_restored
    assert np.array_equal(a.resid, b.resid) and np.array_equal(a.heads, b.heads)
    assert sorted(a.head_pos) == sorted(b.head_pos)
    for k in a.head_pos:
        assert np.array_equal(a.head_pos[k], b.head_pos[k])


@pytest.mark.parametrize("rows", [patching.ROW_TOKENS, 1_000])  # one staircase per sweep; several
def test_sliced_equals_unsliced_and_counts_every_slice(lecture, monkeypatch, rows):
    monkeypatch.setattr(patching, "ROW_TOKENS", rows)
    plain = patching.activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle")
    steps = []
    sliced = patching.activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle",
                                          on_step=lambda d, t: steps.append((d, t)))
    _same(plain, sliced)
    L, T, H = 4, len(plain.clean), 4
    per = max(1, rows // (L * T))
    stairs = 1 + -(-T // per) + -(-H // per) + -(-(H * T) // per)  # everything, resid, heads, head × position (4 layers)
    assert steps == [(d, stairs * L) for d in range(1, stairs * L + 1)]
    assert stairs == {patching.ROW_TOKENS: 5, 1_000: 27}[rows]  # 34 tokens: 120 runs a staircase; 7


def test_sliced_with_chosen_layers(lecture):
    steps = []
    a = patching.activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle", layers=[1])
    b = patching.activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle", layers=[1],
                                     on_step=lambda d, t: steps.append((d, t)))
    _same(a, b)
    assert steps[-1][0] == steps[-1][1] == 16 and [d for d, _ in steps] == list(range(1, 17))


def test_an_exception_in_on_step_stops_the_sweep(lecture):
    calls = []

    def stop(done, total):
        calls.append(done)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        patching.activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle", on_step=stop)
    assert calls == [1, 2, 3]
