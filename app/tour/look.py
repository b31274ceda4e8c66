"""Tour steps that look at a trained model's attention on the lecture's stories: why attention (the answer row
lands on the fact), multi-head (the one head that does it) and attention as explanation (three methods on a
two-hop story)."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.attention.rollout import attention_rollout, fuse_heads
from attnlab.app import state
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.rows import method_rows
from attnlab.app.presets import Preset, presets
from attnlab.app.tour.core import View, box, fit, pct, tok

DECODER = "lecture-decoder"
COPIES = 0.5  # a head that puts more than this share on the copied token copies


def preset(model: str, pid: str) -> Preset:
    """The lecture sample `pid` of `model` (its first sample if the id is gone: retrained models keep ids)."""
    ps = presets(model)
    return next((p for p in ps if p.id == pid), ps[0])


def story(model: str, pid: str):
    """(preset, eager capture, its self-attention stack [L, H, T, T], query row, source column)."""
    p = preset(model, pid)
    cap = state.capture(model, p.text, p.src_text, "eager")
    stack = cap.matrices(next(iter(cap.groups())))  # [L, H, T, T]
    t = stack.shape[-1]
    q = p.query_index if p.query_index is not None and p.query_index < t else t - 1
    src = p.source_index if p.source_index is not None and p.source_index < t else int(np.argmax(stack[-1, :, q].mean(0)))
    return p, cap, stack, q, src


def best_head(stack: np.ndarray, q: int, src: int, named: tuple[int, int] | None) -> tuple[int, int]:
    """The head the preset's note names (if the model has it), else the head with most weight from q on src."""
    if named and named[0] < stack.shape[0] and named[1] < stack.shape[1]:
        return named
    layer, head = np.unravel_index(int(np.argmax(stack[:, :, q, src])), stack.shape[:2])
    return int(layer), int(head)


def why_attention(present: bool) -> View:
    """Topic 1: the lecture's own story — the answer position looks straight at the one fact that answers it."""
    p, cap, stack, q, src = story(DECODER, "decoder-story-1")
    layer, head = best_head(stack, q, src, None)  # the head that lands on the answer (the note names the hops' too)
    per_layer = fuse_heads(stack[:, :, q : q + 1, :], "mean")[:, 0]  # [L, k]: head-mean row of each layer
    rows = {f"layer {i}, head mean": per_layer[i] for i in range(len(per_layer))}
    rows[f"head {layer}.{head}"] = stack[layer, head, q]
    w = float(stack[layer, head, q, src])
    top, prob = cap.top_tokens[q][0], float(cap.top_probs[q][0])
    fig = method_rows(rows, cap.tokens, present=present, exclude=q,
                      title=f"Where does token {q} look? Each row scaled to its max")
    box(fig, src, src, -0.0, len(rows) - 1, f"the fact: {cap.tokens[src]}")
    numbers = {"query": q, "source": src, "layer": layer, "head": head, "weight": w, "distance": q - src,
               "prediction": top, "probability": prob, "answer": p.answer}
    text = (f"The lecture's story hides the answer in one earlier fact: the age of Alex's best friend. At the last "
            f"token (token {q}), head {layer}.{head} puts **{pct(w)}** of its weight on token {src} "
            f"{tok(cap.tokens[src])}, {q - src} tokens back — a convolution would need a window that wide to reach it. "
            f"The model then predicts {tok(top)} with p = **{prob:.3f}** (the story's answer: {tok(p.answer or '?')}).")
    params = {"model": DECODER, "preset": p.id, "query": q, "strip_layer": layer, "strip_head": head}
    return View(fit(fig, present), text, numbers, f"column {src}: the fact's answer token", params)


def multi_head(present: bool) -> View:
    """Topic 6: heads specialise — on an induction sample the copying is done by a few heads, not by all L×H."""
    p, cap, stack, q, src = story(DECODER, "decoder-induction-1")
    n_layers, n_heads = stack.shape[:2]
    d_model = int(state.model_info(DECODER)["d_model"])
    grid = stack[:, :, q, src]  # [L, H]: weight from the query row on the source token
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(grid)), grid.shape))
    copying = [(int(i), int(h)) for i, h in zip(*np.nonzero(grid > COPIES))]  # heads putting most weight there
    rest = float(grid[grid <= COPIES].mean()) if (grid <= COPIES).any() else float("nan")
    fig = grid_heatmap(grid, [f"layer {i}" for i in range(n_layers)], [f"head {h}" for h in range(n_heads)],
                       diverging=False, present=present, value_name="weight",
                       title=f"Weight of token {q} on token {src} ({cap.tokens[src]}), every head")
    for i, h in copying:
        box(fig, h, h, i, i, "")
    layers = sorted({i for i, _ in copying})
    where = (f"all {n_heads} heads of layer {layers[0]}" if len(layers) == 1 and len(copying) == n_heads else
             ", ".join(f"{i}.{h}" for i, h in copying))
    numbers = {"layers": n_layers, "heads": n_heads, "d_head": d_model // n_heads, "layer": layer, "head": head,
               "weight": float(grid[layer, head]), "copying": [f"{i}.{h}" for i, h in copying], "others_mean": rest,
               "query": q, "source": src}
    text = (f"{n_layers} layers × {n_heads} heads, each with its own q, k, v projections of d_head = {d_model} / "
            f"{n_heads} = **{d_model // n_heads}**, concatenated and projected back. On the repeated sequence, token "
            f"{q} should copy what followed its earlier occurrence, token {src} {tok(cap.tokens[src])}. "
            f"**{len(copying)} of {grid.size}** heads put over {pct(COPIES)} of their weight there ({where}; head "
            f"{layer}.{head} the most, **{pct(grid[layer, head])}**); the other {grid.size - len(copying)} heads "
            f"{pct(rest)} on average: the copying is the job of {'one layer' if len(layers) == 1 else 'a few heads'}.")
    params = {"model": DECODER, "preset": p.id, "layer": layer, "head": head, "query": q}
    look = (f"layer {layers[0]}: the heads that copy" if len(layers) == 1 else "the boxed heads: the ones that copy")
    return View(fit(fig, present), text, numbers, look, params)


def explanation(present: bool) -> View:
    """Topic 12: raw attention, rollout and gradient relevance on a two-hop story, against the known answer."""
    p, cap, stack, q, src = story(DECODER, "decoder-retrieval-1")
    rows = {"attention (last layer)": fuse_heads(stack[-1], "mean")[q], "rollout": attention_rollout(stack)[q]}
    answer_id = state.token_id(DECODER, p.answer) if p.answer else None
    rows["gradient relevance"] = state.relevance(DECODER, p.text, p.src_text, q, answer_id).row
    tops = {}
    for name, r in rows.items():
        r = np.array(r, dtype=np.float64)
        r[q] = -np.inf  # the query's own token is not an explanation
        tops[name] = int(np.argmax(r))
    fig = method_rows(rows, cap.tokens, present=present, exclude=q, title=f"Which tokens explain token {q}?")
    box(fig, src, src, 0, len(rows) - 1, f"the answer: {cap.tokens[src]}")
    hits = [n for n, t in tops.items() if t == src]
    numbers = {"query": q, "source": src, "tops": tops, "hits": hits}
    said = "; ".join(f"{n} points at token {t} {tok(cap.tokens[t])}" for n, t in tops.items())
    text = (f"The answer {tok(p.answer or '')} is token {src}, reached through a friend's name. {said}. "
            f"Weights show what was read, not why: **{len(hits)} of {len(rows)}** methods point at the answer here, "
            "and the Rollout page scores each method on held-out stories.")
    params = {"model": DECODER, "preset": p.id, "query": q}
    return View(fit(fig, present), text, numbers, f"column {src}: the known answer", params)
