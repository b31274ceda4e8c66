"""Tour steps on running a model: the KV cache (cached generation equals recomputation) and fused attention
(sdpa and flash give eager's numbers without keeping the T×T matrix)."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.machinery.kv_cache import cache_costs
from attnlab.app import mechanics, state
from attnlab.app.figures.bars import step_deltas
from attnlab.app.figures.tile_stepper import tile_rows, tile_stepper
from attnlab.app.presets import note_head
from attnlab.app.tour.core import HEIGHT, View, fit, note, num
from attnlab.app.tour.look import DECODER, preset

NEW_TOKENS = 12  # the KV cache page's default
FUSED = ("sdpa", "flash")
BLOCK = 8  # the Backends page's default query and key/value block


def kv_cache(present: bool) -> View:
    """Topic 10: generate with cached keys and values; each step's logits against full recomputation."""
    p = preset(DECODER, "decoder-induction-1")
    gen = mechanics.cache_generation(DECODER, p.text, None, NEW_TOKENS, "eager")
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
    """Topic 11: flash attention's tiles for the answer row of one head (running max, running sum, partial output,
    a slider over the tiles), ending on eager's output; sdpa and flash against eager in every layer's pattern."""
    p = preset(DECODER, "decoder-retrieval-4")
    reps = {b: mechanics.backend_check(DECODER, p.text, None, b).detail for b in FUSED}
    worst = max(max(reps[b]["per_site"].values()) for b in FUSED)  # max |Δ pattern| over sites and backends
    cap = state.capture(DECODER, p.text, None, "eager")
    t = len(cap.tokens)
    sites = cap.sites(next(iter(cap.groups())))
    layer, head = note_head(p) or (len(sites) - 1, 0)
    row = p.query_index if p.query_index is not None and p.query_index < t else t - 1
    tiling, z = mechanics.flash_tiling(DECODER, p.text, None, sites[layer], head, BLOCK, BLOCK)
    qb = row // BLOCK
    mine, m, lsum, out = tile_rows(tiling, qb, row)
    jump = int(np.flatnonzero(m == m[-1])[0])  # the tile that brings the row's largest score
    rescale = float(mine[jump].rescale[row - qb * BLOCK])
    final = float(np.abs(out[-1] - z[row]).max())  # the last tile's output against eager's own (float32)
    fig = tile_stepper(tiling, z[row], qb, row, present=present, height=HEIGHT[present],
                       title=f"Head {layer}.{head}, row {row}: the {len(mine)} key/value tiles of {BLOCK}")
    info = state.model_info(DECODER)
    stored = int(info["layers"]) * int(info["heads"]) * t * t * 4  # float32 weights eager keeps
    numbers = {"max_pattern": worst, "max_logits": max(float(reps[b]["max_abs_logits"]) for b in FUSED),
               "tokens": t, "eager_bytes": stored, "kernels": {b: list(reps[b]["kernels"]) for b in FUSED},
               "layer": layer, "head": head, "row": row, "tiles": len(mine), "jump_tile": jump + 1,
               "m_before": float(m[jump - 1]) if jump else float("nan"), "m_after": float(m[jump]),
               "rescale": rescale, "final_vs_eager": final}
    keys = f"keys {mine[jump].cols[0]}–{mine[jump].cols[1] - 1}"
    raised = (f"tile {jump + 1} ({keys}) brings the largest score, m goes from **{m[jump - 1]:.2f}** to "
              f"**{m[jump]:.2f}** and the old sum and output are rescaled by exp(Δm) = **{rescale:.1e}**" if jump
              else f"tile 1 ({keys}) already holds the largest score (m = **{m[0]:.2f}**)")
    text = (f"FlashAttention computes the same softmax(QKᵀ/√d)·V tile by tile, keeping per row only a running max m, "
            f"a running sum l and a partial output — never the T×T matrix. Row {row} of head {layer}.{head}: "
            f"{raised}; after the last of {len(mine)} tiles the output equals eager's to **{final:.1e}**. sdpa and "
            f"flash match eager to **{worst:.1e}** in every pattern of this {t}-token story.")
    params = {"model": DECODER, "preset": p.id, "fl_layer": layer, "fl_head": head, "fl_bq": BLOCK, "fl_bk": BLOCK,
              "fl_qblock": qb, "fl_step": len(mine)}
    return View(fit(fig, present), text, numbers, "the current tile: its point on m and l and its partial output "
                "(move the slider)", params)
