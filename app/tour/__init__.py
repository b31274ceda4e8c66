"""The lecture as a guided tour: one step per topic of the lecture (shared/LECTURE-TOPICS.md), each built at run
time from the model it shows (app/tour/core.py says what a step is). The built-in tour is a tour file
(app/tour/lecture.json, read by app/tour/tour_file.py) whose steps name the builders below."""

from __future__ import annotations

from attnlab.app.tour.builders import BUILDERS
from attnlab.app.tour.core import Step, View
from attnlab.app.tour.tour_file import load_tour

STEPS = load_tour(None).steps  # the built-in tour (app/tour/lecture.json)

__all__ = ["BUILDERS", "STEPS", "Step", "View", "step_of"]


def step_of(raw, n: int | None = None) -> tuple[int, str]:
    """(step number 1..n, note): a URL's `step=` value, or step 1 and a one-line note when it is not a step number
    (n: the tour's length, default the built-in tour's)."""
    n = len(STEPS) if n is None else n
    try:
        k = int(str(raw).strip())
    except (TypeError, ValueError):
        return 1, f"“{str(raw)[:40]}” is not a step number: showing step 1 of {n}."
    if not 1 <= k <= n:
        return 1, f"There is no step {k} (the tour has steps 1 to {n}): showing step 1."
    return k, ""
