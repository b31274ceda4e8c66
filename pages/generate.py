"""Generate (/generate): generation with temperature, top-k and a seed; the attention of each new token to the
context, shown step by step as it is produced (▶ replays the steps)."""

import pandas as pd
import streamlit as st
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads
from attnlab.app.figures.rows import generation_matrix, head_rows
from attnlab.app.figures.style import esc, md
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.inputs import require
from attnlab.app.token_strip import predictions_table, token_strip, unknown_note, unknown_positions
from attnlab.app.url_state import select, slider

MEAN = -1
GROUPS = {"self": "self-attention (to the context)", "cross": "cross-attention (to the source)"}


def head_name(h: int) -> str:
    return "mean of heads" if h == MEAN else f"head {h}"


with page("Generate", "What does each new token look at while it is being written?", icon="✍"):
    inp = require(("generates",), "generates text (it needs a decoder or an encoder–decoder)", ("decoder", "encdec"))
    present = presenting()
    with options():
        c1, c2, c3, c4 = st.columns(4)
        n_new = slider("New tokens", 1, 48, "gen_n", 16, where=c1)
        temperature = slider("Temperature", 0.0, 2.0, "gen_temp", 0.0, step=0.1, where=c2,
                             help="0 = greedy (always the most likely token). Higher = flatter distribution, "
                                  "more surprising choices.")
        top_k = slider("Top-k (0 = off)", 0, 50, "gen_topk", 0, where=c3,
                       help="Sample only among the k most likely tokens.", show=temperature > 0)
        seed = slider("Seed", 0, 99, "gen_seed", 0, where=c4, help="The same seed gives the same sample.",
                      show=temperature > 0)
    sampling = temperature > 0
    tr = mechanics.generation_trace(inp.model, inp.text, inp.src, n_new, float(temperature),
                                (top_k or None) if sampling else None, seed if sampling else None, inp.backend)
    how = (f"sampled at temperature {temperature:g}" + (f", top-{top_k}" if top_k else "") + f", seed {seed}"
           if sampling else "greedy (temperature 0)")
    st.markdown(f"**{tr.n_steps} new tokens**, {how}" + (" — stopped at the end token." if tr.stopped_at_eos else "."))
    context = state.model_info(inp.model)["context"]
    if tr.n_steps < n_new and tr.prompt_len + tr.n_steps >= context:
        st.info(f"Stopped after {tr.n_steps} of {n_new}: the model's context is {context} tokens and the prompt "
                f"has {tr.prompt_len}. Shorten the text to generate more.", icon=":material/block:")
    vocab = state.vocabulary(inp.model)
    unknown = unknown_positions(tr.ids[: tr.prompt_len], vocab)  # prompt positions read as [UNK]
    unknown_note(vocab, unknown, tr.prompt_len, "prompt", tr.tokens)
    token_strip(tr.tokens, [0.0] * tr.prompt_len + list(tr.chosen_prob), query=tr.prompt_len - 1,
                label="prompt, then the generated tokens shaded by the probability they were picked with",
                unknown=unknown)

    sites = tr.sites
    groups = [g for g in ("self", "cross") if any(tr.kinds[s] == g for s in sites)]
    c1, c2, c3 = st.columns(3)
    group = select("Attention", groups, "gen_group", "self", where=c1, format_func=GROUPS.get, show=len(groups) > 1)
    layered = [s for s in sites if tr.kinds[s] == group]
    layer = slider("Layer", 0, len(layered) - 1, "gen_layer", len(layered) - 1, where=c2)
    n_heads = tr.rows[layered[0]].shape[1]
    head = select("Head", [MEAN, *range(n_heads)], "gen_head", MEAN, where=c3, format_func=head_name)
    site = layered[layer]
    cross = group == "cross"
    keys = tr.src_tokens if cross else tr.tokens

    step = slider("Step", 0, tr.n_steps - 1, "gen_step", tr.n_steps - 1,
                  help="Which generated token to inspect; ▶ on the chart replays every step.")
    chart(generation_matrix(tr.step_matrix(site, None if head == MEAN else head), tr.tokens, tr.prompt_len,
                            k_tokens=keys if cross else None, present=present, current=step,
                            title=f"Each new token's attention ({head_name(head)}, layer {layer}) — ▶ replays "
                                  "the generation"), key="gen-matrix", name="generation")
    st.caption("Row s: while writing token s, the last token fed (its query) attends to every key so far. Grey cells "
               "lie in the future of that step; the dotted line ends the prompt.")

    st.subheader(f"Step {step}: writing “{md(tr.tokens[tr.prompt_len + step])}”")
    q = tr.query_position(step)
    row = tr.rows[site][step]  # [H, K]
    k_len = len(keys) if cross else q + 1  # row[:, :k_len] [H, k_len]: the keys this step saw; .mean(0) [k_len]
    a, b = (st.container(), st.container()) if present else st.columns([3, 2], gap="medium")  # a projector: stacked
    with a:
        chart(head_rows(row[:, :k_len], keys[:k_len], present=present,
                        title=f"query {q} ({esc(tr.tokens[q], 20)}) → keys, every head of layer {layer}"),
              key="gen-step", width=None if present else column_px([3, 2], False, "medium")[0],
              name=f"step-{step}")
        token_strip(keys[:k_len], row[:, :k_len].mean(0) if head == MEAN else row[head, :k_len],
                    query=None if cross else q, label=f"keys shaded by {head_name(head)}")
    with b:
        st.markdown("**The choice** (the distribution it was drawn from)")
        predictions_table(tr.top_tokens[step], tr.top_probs[step])
        st.caption(f"Picked “{md(tr.tokens[tr.prompt_len + step])}” with p = {tr.chosen_prob[step]:.3f}."
                   + (" Temperature divides the logits before the softmax; top-k keeps only the k best."
                      if sampling else ""))

    table = pd.DataFrame({"step": range(tr.n_steps), "token": tr.new_tokens, "probability": tr.chosen_prob,
                          "top alternatives": [", ".join(t[:3]) for t in tr.top_tokens]})
    downloads("generate", csv=table,
              npz={s.replace(".", "_"): tr.rows[s] for s in sites} | {"tokens": tr.tokens},
              json_obj={"model": inp.model, "text": inp.text, "src_text": inp.src, "temperature": temperature,
                        "top_k": top_k, "seed": seed, "tokens": tr.tokens, "prompt_len": tr.prompt_len,
                        "chosen_prob": tr.chosen_prob, "top_tokens": tr.top_tokens, "top_probs": tr.top_probs})
