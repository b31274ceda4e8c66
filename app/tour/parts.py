"""Tour steps on the model's parts: positions (RoPE's relative offsets), the block (what each sub-layer writes
into the residual stream) and the three architectures (the encoder–decoder's cross-attention on a translation)."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.machinery import positions as P
from attnlab.app import state
from attnlab.app.figures.block import stream_norms
from attnlab.app.figures.grids import table_heatmap
from attnlab.app.figures.kinds import three_kinds
from attnlab.app.tour.core import HEIGHT, MARK, WIDTH, View, fit, note, pct, tok
from attnlab.app.tour.look import DECODER, preset, story

ROPE_POSITIONS, OFFSET = 24, 3  # the Positions page's RoPE demo at 24 positions; the diagonal that is drawn
ENCDEC = "lecture-encdec"


def positions(present: bool) -> View:
    """Topic 7: RoPE rotates q and k, so the score of a fixed q and k depends only on their offset."""
    info = state.model_info(DECODER)
    d_head = int(info["d_model"]) // int(info["heads"])
    demo = P.rope_demo(d_head, ROPE_POSITIONS)
    S = demo["S"]  # [P, P]: rot(q, m)·rot(k, n)
    fig = table_heatmap(S, xlabel="key position n", ylabel="query position m", value_name="score", present=present,
                        title=f"RoPE, d_head {d_head}: rot(q, m)·rot(k, n)")
    n = ROPE_POSITIONS - 1
    fig.add_shape(type="line", x0=0, y0=OFFSET, x1=n - OFFSET, y1=n, name="tour-look",  # through the cells' centres
                  line={"color": MARK, "width": 4, "dash": "dot"})
    note(fig, (n - OFFSET) / 2, n / 2 + OFFSET / 2, f"offset {OFFSET}: one value")
    rope, absolute = float(np.max(demo["spread_rope"])), float(np.max(demo["spread_abs"]))
    numbers = {"positional": info["positional"], "d_head": d_head, "spread_rope": rope, "spread_abs": absolute,
               "offset_value": float(S[OFFSET, 0])}
    text = (f"{DECODER} uses **{info['positional']}** positions: q and k are rotated by angles proportional to their "
            f"positions, so a score depends on the offset m − n only. Along the offset-{OFFSET} diagonal every cell "
            f"reads **{S[OFFSET, 0]:.3f}**; the largest spread along any diagonal is **{rope:.1e}** (rounding), "
            f"against **{absolute:.2f}** when absolute sinusoidal positions are added to the same q and k instead.")
    params = {"model": DECODER, "pos_scheme": "rope", "pos_n": ROPE_POSITIONS}
    return View(fit(fig, present), text, numbers, f"the offset-{OFFSET} diagonal: one repeated score", params)


def block(present: bool) -> View:
    """Topic 8: the residual stream at the answer token, and what attention and the MLP of each block add."""
    p, cap, stack, q, src = story(DECODER, "decoder-retrieval-2")
    w = state.block_walk(DECODER, p.text, None, q, 1.0, None)
    deltas = {"attention": w.attn_delta, "MLP": w.mlp_delta}
    part, layer = max(((k, int(np.argmax(v))) for k, v in deltas.items()), key=lambda kv: deltas[kv[0]][kv[1]])
    fig = stream_norms(w.resid_norms, w.attn_delta, w.mlp_delta, present=present,
                       title=f"Token {q}: the residual stream through {w.n_layers} {w.norm_rule}-norm blocks")
    biggest = float(deltas[part][layer])
    bar = -0.2 if part == "attention" else 0.2  # grouped bars: attention left of the block's tick, the MLP right
    note(fig, layer + 1 + bar, biggest, f"largest write: layer {layer} {part}", ax=-60, ay=-20)  # left: clear of
    # the stream's line and its last point, which the narrative quotes
    numbers = {"norm_rule": w.norm_rule, "norm_type": w.norm_type, "embed_norm": float(w.resid_norms[0]),
               "final_norm": float(w.resid_norms[-1]), "part": part, "layer": layer, "biggest": biggest,
               "top": w.top_tokens[0], "p_top": float(w.top_probs[0]), "check": float(w.max_abs_vs_model)}
    text = (f"Each {w.norm_rule}-norm block adds attention(norm(x)) and then MLP(norm(x)) to the residual stream x "
            f"({w.norm_type}, per token, so causality holds). At token {q} the stream's norm goes from "
            f"**{w.resid_norms[0]:.2f}** after the embedding to **{w.resid_norms[-1]:.2f}**; the largest write is layer "
            f"{layer}'s {part} (‖Δ‖ = **{biggest:.2f}**), and the head predicts {tok(w.top_tokens[0])} with p = "
            f"{w.top_probs[0]:.3f}.")
    params = {"model": DECODER, "preset": p.id, "query": q}
    return View(fit(fig, present), text, numbers, f"layer {layer}'s {part} update", params)


def architectures(present: bool) -> View:
    """Topic 9: the three kinds of attention side by side on one translation — the decoder's causal
    self-attention, the cross-attention that reads the encoder's output (against its reference alignment) and the
    encoder's bidirectional self-attention."""
    p = preset(ENCDEC, "encdec-translation-1")
    cap = state.capture(ENCDEC, p.text, p.src_text, "eager")
    last = {g: cap.matrices(g)[-1].mean(0) for g in ("decoder", "cross", "encoder")}  # [T, T], [T, S], [S, S]
    m = last["cross"]
    cells = [(t - 1, s) for t, s in p.alignment if 1 <= t <= len(cap.tokens) and s < len(cap.src_tokens)]
    on = float(np.mean([m[r, c] for r, c in cells])) if cells else float("nan")
    hits = sum(int(np.argmax(m[r]) == c) for r, c in cells)
    dec_above = float(np.triu(cap.matrices("decoder"), 1).max())  # [L, H, T, T]: weight above the diagonal
    enc_later = float(np.triu(last["encoder"], 1).sum(-1).mean())  # mean weight an encoder row puts on later tokens
    layer = cap.matrices("cross").shape[0] - 1
    fig = three_kinds(last["decoder"], m, last["encoder"], cap.tokens, cap.src_tokens, present=present,
                      height=HEIGHT[present], width=WIDTH, cells=cells,
                      title=f"{ENCDEC}, layer {layer}, head mean: the three kinds of attention")
    numbers = {"aligned_weight": on, "aligned_hits": hits, "aligned_cells": len(cells), "decoder_above": dec_above,
               "encoder_later": enc_later, "target_len": len(cap.tokens), "source_len": len(cap.src_tokens)}
    text = (f"One encoder–decoder, one sentence pair, three kinds of attention. Decoder self-attention is causal "
            f"(largest weight above the diagonal: **{dec_above:.0f}**); encoder self-attention is bidirectional (a "
            f"row puts **{pct(enc_later)}** on later tokens on average); cross-attention is a {len(cap.tokens)} × "
            f"{len(cap.src_tokens)} rectangle, target queries reading the encoder's output: {hits} of {len(cells)} "
            f"target words look hardest at their aligned source word (**{pct(on)}** of the weight on average).")
    params = {"model": ENCDEC, "preset": p.id, "x_layer": layer, "x_head": -1}
    return View(fit(fig, present), text, numbers, "the middle panel's circles: the reference alignment, one row "
                "before each word (row t reads the source for the word it writes next)", params)
