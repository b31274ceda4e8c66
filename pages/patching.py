"""Activation patching (/patching): run a corrupted prompt with one activation taken from the clean run and
measure how much of the clean–corrupted logit difference comes back — per layer and position of the residual
stream, per head, and per head and position. Attention shows where a head looks; patching shows what the
answer depends on."""

import numpy as np
import streamlit as st
from attnlab.app import job_entries
from attnlab.app.downloads import downloads
from attnlab.app.figures.interp import value_grid
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import require
from attnlab.app.interp_examples import EXAMPLES, matching
from attnlab.app.interp_notes import patch_note
from attnlab.app.job_view import job_result
from attnlab.app.prompt_pair import prompt_pair
from attnlab.app.url_state import index


def _label(i: int, tok: str) -> str:
    return f"{i} {tok}"


with page("Activation patching", "Which activations does the answer actually depend on?"):
    inp = require(("internals",), "patches activations inside the model")
    present = presenting()
    st.markdown(
        "Two prompts of the same length differ in one detail, so the model answers differently: the **clean** prompt "
        "gives the answer, the **corrupted** one the wrong answer. Run the corrupted prompt, but take one activation "
        "from the clean run: the share of the logit difference *logit(answer) − logit(wrong)* that comes back is "
        "how much the answer depends on that activation (0 %: nothing; 100 %: all of it).")
    model, clean, corrupt, answer, wrong, ex = prompt_pair(EXAMPLES, inp, "pt", lambda e: e.patch_note)
    p = job_result(lambda again: job_entries.patching_job(model, clean, corrupt, answer, wrong, again=again),
                   "Patching every layer, position and head", "pt-job")
    L, T = p.resid.shape
    H = p.heads.shape[1]
    pos = [_label(i, t) for i, t in enumerate(p.clean)]
    st.markdown(f"logit({md(p.answer)}) − logit({md(p.wrong)}): **{p.ld_clean:+.3f}** clean, **{p.ld_corrupt:+.3f}** "
                f"corrupted. Patching the whole stream restores {100 * p.all_restored:.2f} %; "
                f"{sum(p.runs.values())} patched runs in {p.seconds['total']:.1f} s.")
    chart(value_grid(p.resid, [f"layer {i}" for i in range(L)], pos, present=present, zlim=100,
                     title="residual stream entering each layer (rows) at each position (columns)"),
          key="pt-resid", name="patch-resid")
    st.caption("Where the information that decides the answer sits: a column lights up where the clean and corrupted "
               "prompts differ, and the cells move to the last position at the layer that carries it there.")
    chart(value_grid(p.heads, [f"layer {i}" for i in range(L)], [f"head {h}" for h in range(H)], present=present,
                     zlim=100, title="each head's output, every position"), key="pt-heads", name="patch-heads")
    layers = sorted(p.head_pos)
    layer = layers[index("Layer (head × position)", len(layers), "pt_layer", 0)] if len(layers) > 1 else layers[0]
    chart(value_grid(p.head_pos[layer], [f"head {h}" for h in range(H)], pos, present=present, zlim=100,
                     title=f"layer {layer}: each head's output at one position"), key="pt-head-pos", name="patch-head-pos")
    top = np.unravel_index(np.argsort(-np.abs(p.heads), axis=None)[:3], p.heads.shape)
    st.markdown("Heads that move the answer most: " + ", ".join(
        f"layer {i} head {h} ({100 * p.heads[i, h]:+.0f} %)" for i, h in zip(*top)) + ".")
    ex_note = ex if ex is not None else matching(model, clean)
    if ex_note is not None and ex_note.corrupt == corrupt:
        st.info(ex_note.patch_note or patch_note(p))
    downloads("patching", npz={"resid": p.resid, "heads": p.heads, **{f"head_pos_{k}": v for k, v in p.head_pos.items()},
                               "clean": p.clean, "corrupt": p.corrupt}, json_obj=p.to_json())
