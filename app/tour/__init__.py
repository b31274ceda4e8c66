"""The lecture as a guided tour: one step per topic of the lecture (shared/LECTURE-TOPICS.md), each built at run
time from the model it shows (app/tour/core.py says what a step is). The built-in tour is a tour file
(app/tour/lecture.json, read by app/tour/tour_file.py) whose steps name the builders below."""

from __future__ import annotations

from attnlab.app.tour import beyond, compute, look, parts, running, seeing
from attnlab.app.tour.core import Step, View

BUILDERS = {
    "why-attention": look.why_attention, "query-key-value": compute.query_key_value,
    "scaled-dot-product": compute.scaled_dot_product, "masks": compute.masks, "permutation": compute.permutation,
    "multi-head": look.multi_head, "positions": parts.positions, "block": parts.block,
    "architectures": parts.architectures, "kv-cache": running.kv_cache, "flash": running.flash,
    "explanation": look.explanation, "vit": seeing.vit, "moe": seeing.moe, "real-english": beyond.real_english,
    "logit-lens": beyond.logit_lens, "patching": beyond.patching,
    # attention sinks: its builder goes here (e.g. "sinks": sinks.sinks), and its entry into lecture.json
}


def _builtin() -> list[Step]:
    from attnlab.app.tour.tour_file import load_tour

    return load_tour(None).steps


STEPS = _builtin()

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
