"""The lecture as a guided tour: one step per topic of the lecture (shared/LECTURE-TOPICS.md), each built at run
time from the model it shows (app/tour/core.py says what a step is)."""

from __future__ import annotations

from attnlab.app.tour import beyond, compute, look, parts, running, seeing
from attnlab.app.tour.core import Step, View

STEPS = [
    Step(1, "Why attention: the answer comes from one earlier fact", "", look.why_attention),
    Step(2, "Query, key, value: a weighted sum of values", "heatmaps", compute.query_key_value),
    Step(3, "Scaled dot product: why divide by √d_k", "scores", compute.scaled_dot_product),
    Step(4, "Masks: −∞ before the softmax", "step-by-step", compute.masks),
    Step(5, "Permutation: attention alone sees a set", "permutation", compute.permutation),
    Step(6, "Multi-head: heads specialise", "heatmaps", look.multi_head),
    Step(7, "Positions: RoPE and the relative offset", "positions", parts.positions),
    Step(8, "The block: residual stream, norm, attention, MLP", "block", parts.block),
    Step(9, "Decoder, encoder, encoder–decoder", "cross-attention", parts.architectures),
    Step(10, "KV cache: the same output, one row per step", "kv-cache", running.kv_cache),
    Step(11, "Flash attention: same math, no T×T matrix", "backends", running.flash),
    Step(12, "Attention as explanation: what, not why", "rollout", look.explanation),
    Step(13, "Vision Transformer: patches, CLS and rollout", "vision", seeing.vit),
    Step(14, "Mixture of experts: a router picks the MLPs", "routing", seeing.moe),
    Step(15, "Real English: SmolLM2 finds the indirect object", "heatmaps", beyond.real_english),
    Step(16, "Logit lens: when the answer appears", "logit-lens", beyond.logit_lens),
    Step(17, "Activation patching: what the answer depends on", "patching", beyond.patching),
]

__all__ = ["STEPS", "Step", "View", "step_of"]


def step_of(raw) -> tuple[int, str]:
    """(step number 1..len(STEPS), note): a URL's `step=` value, or step 1 and a one-line note when it is not
    a step number."""
    n = len(STEPS)
    try:
        k = int(str(raw).strip())
    except (TypeError, ValueError):
        return 1, f"“{str(raw)[:40]}” is not a step number: showing step 1 of {n}."
    if not 1 <= k <= n:
        return 1, f"There is no step {k} (the tour has steps 1 to {n}): showing step 1."
    return k, ""
