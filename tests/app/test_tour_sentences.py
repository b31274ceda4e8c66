"""The tour's sentences say what its figures show: step 2 puts scores and weights on their own colour scales
(the top α as dark as the top score), step 5 names the settings in words, step 6 counts every head that copies,
step 8's label leaves the quoted point free, step 15 claims no more than where a head looks, and no narrative
prints a raw float."""

from __future__ import annotations

import re

import numpy as np
import pytest
from attnlab.app.tour import STEPS
from attnlab.app.tour.handout import views


@pytest.fixture(scope="module")
def built():
    return {s.topic: v for s, v in views()}


def test_step_2_puts_scores_and_weights_on_their_own_scales(built):
    v = built[2]
    scores, weights = (next(t for t in v.fig.data if t.name == n) for n in ("q·k/√d", "α"))
    assert (scores.zmin, scores.zmax) == (float(np.min(scores.z)), float(np.max(scores.z)))
    assert (weights.zmin, weights.zmax) == (0.0, 1.0) and np.max(weights.z) == pytest.approx(v.numbers["weight"])
    assert scores.zmax == pytest.approx(v.numbers["score"]) and scores.xaxis != weights.xaxis


def test_step_5_names_the_settings_in_words(built):
    text = built[5].narrative
    assert "equivariant here: none" not in text
    assert re.search(r"only with no positions; a causal mask, learned positions, .* and ALiBi break the symmetry",
                     text)


def test_step_6_counts_every_head_that_copies(built):
    v = built[6]
    grid = np.array(v.fig.data[0].z)  # [L, H]
    copying = [f"{i}.{h}" for i, h in zip(*np.nonzero(grid > 0.5))]
    assert v.numbers["copying"] == copying and len(copying) >= 2
    marked = [s for s in v.fig.layout.shapes if s.name == "tour-look"]
    assert len(marked) == len(copying)
    assert f"**{len(copying)} of {grid.size}** heads" in v.narrative and "the head that copies" not in v.look


def test_step_8s_label_sits_left_of_the_bar_it_points_at(built):
    (a,) = [a for a in built[8].fig.layout.annotations if a.name == "tour-look"]
    assert a.ax < 0 and a.xanchor == "right"  # away from the stream's line and its last point, on the right
    assert a.x == pytest.approx(built[8].numbers["layer"] + 1 - 0.2)  # the attention bar, left in its group
    assert a.y == pytest.approx(built[8].numbers["biggest"])


def test_step_15_claims_where_a_head_looks_not_what_it_does(built):
    v = built[15]
    if v.numbers.get("installed") is False:
        pytest.skip("smollm2 is not installed")
    assert "reads the other name" not in v.look and v.look.startswith(f"head {v.numbers['layer']}.")
    assert "Where a head looks is not what it does: patching (step 17) measures that." in v.narrative


def test_no_narrative_prints_a_raw_float(built):
    for k, v in built.items():
        assert not re.search(r"\d\.\d{5,}|\d{5,}\.\d", v.narrative), (k, v.narrative)
    assert re.search(r"\(tolerance \d\.\de-\d\d\)", built[10].narrative)  # not 0.000187358
    assert len(built) == len(STEPS)
