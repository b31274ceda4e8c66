"""Logit lens (/logit-lens): the residual stream after each layer read through the model's final norm and
unembedding — what the model would predict if it stopped there — the answer's probability layer by layer, and
the direct logit attribution of the answer to each head and MLP."""

import numpy as np
import streamlit as st
from attnlab.app import state
from attnlab.app.downloads import downloads
from attnlab.app.figures.interp import answer_curve, lens_grid, value_grid
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, guard, page, presenting
from attnlab.app.inputs import require
from attnlab.app.interp_examples import matching
from attnlab.app.interp_notes import lens_note

with page("Logit lens", "What would the model predict if it stopped after each layer?"):
    inp = require(("internals",), "reads the residual stream through a token head")
    present = presenting()
    st.markdown(
        "Each block adds its attention and MLP outputs to the **residual stream**. The logit lens reads the stream "
        "after every layer through the model's own final norm and unembedding, as if the remaining layers were not "
        "there. The last row is exactly the model's prediction; earlier rows show when the answer appears.")
    preset_answer = inp.preset.answer if inp.preset is not None and inp.preset.answer else ""
    c1, c2 = st.columns(2)
    answer = c1.text_input("Answer token", value=preset_answer, key=f"lens_answer:{inp.model}:{preset_answer}",
                           help="One token: its probability after each layer and its direct logit attribution.")
    wrong = c2.text_input("Compared with (optional)", value="", key="lens_wrong",
                          help="A second token: the attribution splits the logit difference answer − this token.")
    lens = state.logit_lens(inp.model, inp.text, answer or None, src_text=inp.src)
    rows, tokens = lens.rows, lens.tokens
    chart(lens_grid(lens.top_tokens, lens.top_probs, rows, tokens, present=present,
                    title="top-1 token read from the stream after each layer (rows) at each position (columns)"),
          key="lens-grid", name="logit-lens")
    st.caption("Each cell: the most likely next token if the model stopped after that layer, shaded by its "
               "probability (hover for the top 5). Read a column downwards to watch one position's guess form.")
    if lens.answer_probs is not None:
        st.markdown(f"**{md(lens.answer)}** at the last position ({md(tokens[-1])}): probability "
                    f"{lens.answer_probs[0, -1]:.4f} after the embeddings, {lens.answer_probs[-1, -1]:.4f} at the output "
                    f"(rank {int(lens.answer_ranks[-1, -1])}).")
        chart(answer_curve(rows, lens.answer_probs[:, -1], present=present, name=f"p({lens.answer})",
                           title="the answer's probability after each layer (last position)"),
              key="lens-answer", name="lens-answer")
        st.subheader("Direct logit attribution: who writes the answer")
        with guard():
            d = state.logit_attribution(inp.model, inp.text, answer, wrong or None, src_text=inp.src)
            grid = np.concatenate([d.heads, d.mlps[:, None]], axis=1)  # [L, H + 1]
            cols = [f"head {h}" for h in range(d.heads.shape[1])] + ["MLP"]
            what = f"logit({d.answer}) − logit({d.wrong})" if d.wrong else f"logit({d.answer})"
            chart(value_grid(grid, [f"layer {i}" for i in range(len(grid))], cols, percent=False, name="logit",
                             present=present, title=f"each head's and MLP's direct share of {what}"),
                  key="dla-grid", name="logit-attribution")
            st.markdown(
                f"The parts sum to **{d.total:.4f}**; the model's {what} is **{d.logit:.4f}** (embeddings "
                f"{d.embed:+.3f}, biases {d.attn_bias + d.norm_bias:+.3f}). Each part is what that head or MLP adds "
                f"to the final stream, read through the final {d.norm} with its scale frozen at σ = {d.scale:.3f} "
                "(the value of the whole stream, as TransformerLens does): the norm is then linear, so the parts add "
                "up exactly. *Direct* only: a head whose output later heads read (a mover) can score near zero here.")
    example = matching(inp.model, inp.text)
    if example is not None:
        st.info(example.lens_note or lens_note(state.logit_lens(example.model, example.clean, example.answer),
                                               state.logit_attribution(example.model, example.clean, example.answer,
                                                                       example.wrong)))
    downloads("logit-lens", npz={"top_ids": lens.top_ids, "top_probs": lens.top_probs, "tokens": tokens, "rows": rows},
              json_obj=lens.to_json())
