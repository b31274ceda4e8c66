"""Permutation (/permutation): shuffle the tokens and watch q, k, v, scores, weights and outputs shuffle the same
way — exactly, with no positions and no mask — and see how much each position scheme and a causal mask break it."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.machinery.permutation import MAX_TOKENS, MODEL_SEED, QUANTITIES, SETTINGS
from attnlab.app import state
from attnlab.app.columns import wrapping_columns
from attnlab.app.downloads import downloads
from attnlab.app.figures.grids import delta_grid
from attnlab.app.figures.matrix import colour_ramp, label_margins, matrix_heatmap
from attnlab.app.figures.style import cell_px, font_size, md, title_lines_px, wrap
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.url_state import index, remember, seed, select, slider

TOKENIZERS = {"random-encoder": "bytes (one token per character)", "lecture-decoder": "the lecture models' words"}
MODES = {"random": "a seeded random shuffle", "typed": "indices I type"}
TOLERANCE = 1e-5  # float32 rounding; anything above is a real difference
LABELS = {"q": "queries q", "k": "keys k", "v": "values v", "scores": "scores (scaled q·kᵀ + bias)",
          "weights": "weights (softmax)", "outputs": "outputs z = weights·v"}
MAX_TICKS = 25  # labels that fit a panel 560 px wide (on a 1024 px screen); past them, every other token


def text_box(label: str, key: str, default: str, where=None, help: str | None = None) -> str:
    """A text input whose value lives in the URL (seeded URL > this session > default)."""
    seed(key, default, str, lambda v: isinstance(v, str))
    value = (where or st).text_input(label, key=key, help=help)
    remember(key, value, value)
    return value


with page("Permutation", "Shuffle the tokens: does attention notice the new order?", icon=":material/shuffle:"):
    present = presenting()
    with options():
        c1, c2 = st.columns([3, 2])
        text = text_box("Text", "perm_text", "the cat sat on the mat", where=c1,
                        help=f"2 to {MAX_TOKENS} tokens.")
        tok = select("Tokens", list(TOKENIZERS), "perm_tok", "random-encoder", where=c2, format_func=TOKENIZERS.get)
        c1, c2 = st.columns([2, 3])
        mode = select("Shuffle", list(MODES), "perm_mode", "random", where=c1, format_func=MODES.get,
                      horizontal=True)
        if mode == "random":
            rng_seed = slider("Seed of the shuffle", 0, 99, "perm_seed", 0, where=c2)
            order = None
        else:
            rng_seed = 0
            order = text_box("Permutation: new position i holds old token …", "perm_order", "", where=c2,
                             help="Indices 0…T−1 separated by spaces or commas; blank = reverse the text.")
            order = order if order.strip() else "reverse"
    study = state.permutation_study(tok, text, order, rng_seed)
    T = len(study.tokens)
    st.markdown(f"**Original** ({T} tokens): {' '.join(md(t) for t in study.tokens)}  \n"
                f"**Shuffled**: {' '.join(md(t) for t in study.permuted_tokens)}  \n"
                f"Permutation π (new position i holds old token π[i]): `{' '.join(map(str, study.perm))}`")
    st.caption(f"The models: random-weight 2-layer encoders (d_model 64, 4 heads) built with "
               f"`build_model(ModelConfig(positional=…))` on the same seed ({MODEL_SEED}) and sharing every weight; "
               "only the position scheme differs. Eager backend; q, k, v, scores, weights and outputs come from "
               "the hooks blocks.{i}.attn.hook_{q,k,v,attn_scores,pattern,z}.")

    # -- the table -------------------------------------------------------------------------------------
    st.subheader("How far is the shuffled run from the original, after un-shuffling?")
    n_layers = study.deltas.shape[1]
    t_layer = select("Layers", ["all", *range(n_layers)], "perm_tlayer", "all", horizontal=True,
                     format_func=lambda v: "max over all layers" if v == "all" else f"layer {v}")
    table = study.table(None if t_layer == "all" else int(t_layer))  # [setting, quantity]
    cols = list(QUANTITIES)
    chart(delta_grid(table, study.settings, cols, TOLERANCE, present=present,
                     title="max |original − un-permuted| per setting and quantity"), key="perm-table",
          name="permutation-deltas")
    df = pd.DataFrame(table, index=study.settings, columns=cols)
    df["equivariant"] = ["yes" if r.max() <= TOLERANCE else "no" for r in table]
    equiv = st.column_config.TextColumn("equiv.", help=f"Equivariant: every difference ≤ {TOLERANCE:g}.")
    halves = [cols[:3], cols[3:]] if present else [cols]  # the projector's large digits: two tables, whole at 1024 px
    for i, part in enumerate(halves):
        shown = df[part + (["equivariant"] if i == len(halves) - 1 else [])]
        st.dataframe(shown.style.format({c: "{:.1e}" for c in part}), width="stretch",
                     column_config={"equivariant": equiv})
    st.caption(f"equiv. 'yes' (equivariant): every difference is float32 rounding (≤ {TOLERANCE:g}). "
               "No positions and no mask: "
               "attention only sees a set of tokens, so shuffling the input shuffles every result the same way. "
               "Learned and sinusoidal tables change x itself (q, k, v differ already in layer 0); RoPE rotates q "
               "and k (v stays exact in layer 0); ALiBi adds a distance bias to the scores; a causal mask lets a "
               "token see only the tokens before it — in layer 0 q, k, v and the unmasked scores stay exact, the "
               "weights do not. ALiBi's bias −m·|i − j| is symmetric, so reversing the text keeps it exact.")

    # -- the matrices side by side ---------------------------------------------------------------------
    st.subheader("Side by side")
    c1, c2, c3, c4 = st.columns(4)
    setting = select("Setting", study.settings, "perm_set", "none", where=c1)
    qty = select("Quantity", cols, "perm_q", "weights", where=c2, format_func=LABELS.get)
    layer = index("Layer", n_layers, "perm_layer", 0, where=c3)
    head = index("Head", study.original[setting][qty].shape[1], "perm_head", 0, where=c4)
    a = study.original[setting][qty][layer, head]  # [T, T] or [T, d]
    p = study.permuted[setting][qty][layer, head]
    u = study.unpermuted[setting][qty][layer, head]
    matrix = qty in ("scores", "weights")
    kind = "pattern" if qty == "weights" else "scores"
    dims = [f"d{i}" for i in range(a.shape[1])]
    panels = (("original", a, study.tokens), ("shuffled run, as computed", p, study.permuted_tokens),
              ("shuffled, then un-shuffled", u, study.tokens))
    both = np.stack([a, p, u]).astype(np.float64)  # [3, T, T] or [3, T, d]: one colour scale for the three
    both = both[np.isfinite(both)]  # masked scores (−∞) show as masked cells
    top = float(np.abs(both).max(initial=0.0)) or 1.0
    zrange = (0.0, float(both.max(initial=0.0)) or 1.0) if kind == "pattern" else (-top, top)
    size = font_size(present) - 2  # the tick labels' font
    margins = label_margins(study.tokens if matrix else dims, study.tokens, size, False)  # px around the plot
    cell = cell_px(present)
    width = max(320, cell * a.shape[1] + margins["l"] + margins["r"] + 10)  # px: a panel's narrowest width
    chart(colour_ramp(zrange, kind=kind, present=present), key="perm-scale", name="permutation-colour-scale")
    for i, (col, (name, m, toks)) in enumerate(zip(wrapping_columns(3, "perm-panels", width), panels)):
        title = f"{wrap(name, width - 20, present)}<br>{qty}, layer {layer}, head {head}"  # lines alike: plots level
        height = cell * a.shape[0] + margins["b"] + 60 + title_lines_px(title, present) + 10
        with col:
            chart(matrix_heatmap(m, toks, toks if matrix else dims, kind=kind, present=present, square=matrix,
                                 zrange=zrange, max_ticks=MAX_TICKS, title=title, height=height, showscale=False),
                  key=f"perm-m{i}", name=f"permutation-{qty}-{name.split(',')[0]}")
    st.caption("The three panels share the colour scale above them.")
    delta = float(abs(a.astype(float) - u).max())
    verdict = "equal up to float32 rounding" if delta <= TOLERANCE else "different: the order mattered"
    st.markdown(f"**max |original − un-shuffled|** for {setting}, {LABELS[qty]}, layer {layer}, head {head}: "
                f"**{delta:.1e}** — {verdict}.")

    downloads(f"permutation-{setting.replace(' ', '')}-{qty}-L{layer}H{head}", csv=df.to_csv(index_label="setting"),
              npz={"original": a, "shuffled": p, "unshuffled": u, "perm": study.perm, "deltas": study.deltas},
              json_obj={"text": text, "tokens": study.tokens, "perm": study.perm, "tokenizer": tok,
                        "settings": study.settings, "quantities": cols, "deltas_by_layer": study.deltas,
                        "model_seed": MODEL_SEED, "positional": [s for _, s, _ in SETTINGS]})
