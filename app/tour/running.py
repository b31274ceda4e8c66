"""Tour steps on running a model: the KV cache (cached generation equals recomputation) and fused attention
(sdpa and flash give eager's numbers without keeping the T×T matrix)."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.machinery.checks import TOL_BACKEND
from attnlab.analysis.machinery.kv_cache import cache_costs
from attnlab.app import state
from attnlab.app.figures.bars import step_deltas
from attnlab.app.figures.grids import delta_grid
from attnlab.app.tour.core import View, box, fit, note, num
from attnlab.app.tour.look import DECODER, preset

NEW_TOKENS = 12  # the KV cache page's default
FUSED = ("sdpa", "flash")


def kv_cache(present: bool) -> View:
    """Topic 10: generate with cached keys and values; each step's logits against full recomputation."""
    p = preset(DECODER, "decoder-induction-1")
    gen = state.cache_generation(DECODER, p.text, None, NEW_TOKENS, "eager")
    steps = gen["steps"]
    deltas = np.array([s["max_abs_logits"] for s in steps])
    same = sum(s["cached_token"] == s["uncached_token"] for s in steps)
    info = state.model_info(DECODER)
    cost = cache_costs(gen["prompt_len"], len(steps), int(info["layers"]), int(info["heads"]))
    fig = step_deltas(deltas, [s["cached_token"] for s in steps], gen["tolerance"], passed=[s["passed"] for s in
                      steps], present=present, title="max |Δ next-token logits| per step (cached − uncached)")
    worst = int(np.argmax(deltas))
    note(fig, worst, np.log10(max(deltas[worst], 1e-12)), f"worst: {deltas[worst]:.1e}")
    saved = float(cost["uncached"][-1] / cost["cached"][-1])
    numbers = {"steps": len(steps), "same_tokens": same, "worst": float(deltas.max()), "tolerance": gen["tolerance"],
               "prompt_len": gen["prompt_len"], "cells_cached": int(cost["cached"][-1]),
               "cells_uncached": int(cost["uncached"][-1]), "saving": saved}
    text = (f"With causal attention earlier rows never change, so keys and values are kept and each new token "
            f"computes one row. Over {len(steps)} generated tokens the cached logits match recomputation within "
            f"**{deltas.max():.1e}** (tolerance {num(gen['tolerance'])}), {same} of {len(steps)} tokens identical; "
            f"the run computes **{cost['cached'][-1]:,}** score cells instead of {cost['uncached'][-1]:,} "
            f"({saved:.1f}× fewer).")
    params = {"model": DECODER, "preset": p.id, "kv_n": NEW_TOKENS, "backend": "eager"}
    return View(fit(fig, present), text, numbers, "every bar under the dashed tolerance line", params)


def flash(present: bool) -> View:
    """Topic 11: the fused backends against eager, per layer, and the T×T weights they never store."""
    p = preset(DECODER, "decoder-retrieval-4")
    reps = {b: state.backend_check(DECODER, p.text, None, b).detail for b in FUSED}
    sites = list(reps["sdpa"]["per_site"])
    z = np.array([[reps[b]["per_site"][s] for b in FUSED] for s in sites])  # [sites, backends]
    fig = delta_grid(z, sites, [f"{b} vs eager: pattern" for b in FUSED], TOL_BACKEND, present=present,
                     title=f"Max |Δ pattern| per layer (tolerance {TOL_BACKEND:g})")
    r, c = np.unravel_index(int(np.argmax(z)), z.shape)
    box(fig, c, c, r, r, "")
    cap = state.capture(DECODER, p.text, None, "eager")
    t = len(cap.tokens)
    info = state.model_info(DECODER)
    stored = int(info["layers"]) * int(info["heads"]) * t * t * 4  # float32 weights eager keeps
    numbers = {"max_pattern": float(z.max()), "max_logits": max(float(reps[b]["max_abs_logits"]) for b in FUSED),
               "tokens": t, "eager_bytes": stored, "kernels": {b: list(reps[b]["kernels"]) for b in FUSED}}
    text = (f"FlashAttention computes the same softmax(QKᵀ/√d)·V in tiles with an online softmax, never writing the "
            f"T×T matrix. On this {t}-token story sdpa and flash agree with eager to **{z.max():.1e}** in every "
            f"pattern and **{numbers['max_logits']:.1e}** in the logits, while eager keeps {stored / 1024:,.0f} KiB "
            f"of weights (L·H·T² floats, growing with T²) that the fused kernels ({', '.join(reps['flash']['kernels'])})"
            " never store.")
    params = {"model": DECODER, "preset": p.id}
    return View(fit(fig, present), text, numbers, "the largest difference: still float32 rounding", params)
