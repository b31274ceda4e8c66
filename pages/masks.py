"""Masks (/masks): the same text and weights under two masks, side by side."""

import numpy as np
import streamlit as st
from attnlab.analysis.attention.masks import zero_after_softmax_vs_neg_inf
from attnlab.app import state
from attnlab.app.columns import column_px, wrapping_columns
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.bars import token_bars
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.panels import panel_grid, panel_layers, run_panels
from attnlab.app.figures.style import head_names, md
from attnlab.app.frame import chart, guard, options, page, presenting, switch_caption
from attnlab.app.inputs import require
from attnlab.app.presets import presets
from attnlab.app.url_state import index, select, slider
from attnlab.model.registry import bundled_names

NAMES = {"causal": "causal", "bidirectional": "bidirectional", "sliding_window": "sliding window",
         "prefix_lm": "prefix-LM", "padding": "padding (per key)"}
ASSUMES = {
    "causal": "query i sees keys j ≤ i: future scores are set to −∞ before the softmax (decoders, GPT).",
    "bidirectional": "every query sees every key (encoders: BERT, ViT).",
    "sliding_window": "query i sees itself and the w−1 keys before it (Longformer, Mistral).",
    "prefix_lm": "the first p tokens are visible to every query, the rest causally (T5's prefix LM).",
    "padding": "the last n tokens are padding: hidden as KEYS from every query (one mask per key, not per pair); "
               "padded query rows are still computed and ignored later.",
}

# The six side-by-side panels are a third of the page wide: at most 256 cells a side, a PNG above 128 × 128
# (at T = 1,024 the page sent 2.3 MB with 512 × 512 panels; its budget is 2 MB).
PANEL = {"max_side": 256, "png_cells": 128 * 128}
PAIR_PX = 440  # the two trained models side by side while each gets this width


with page("Masks", "What changes when the same text and weights run under a different mask?"):
    inp = require(("masks",), "runs the same weights under another mask")
    present = presenting()
    can = state.model_info(inp.model)["can"]
    base = "causal" if can.causal else "bidirectional"
    other = "causal" if base == "bidirectional" else "bidirectional"
    cap_a = inp.capture()
    group = "decoder" if can.reads_source else "self"
    t = len(cap_a.group_tokens(group)[0])
    with options():
        c1, c2, c3, c4 = st.columns(4)
        kind_b = select("Compare with", [k for k in NAMES if k != base], "mask_b", other, where=c1,
                        format_func=NAMES.get)
        param = None
        if kind_b == "sliding_window":
            param = slider("Window w", 1, max(1, t), "window", min(4, t), where=c2)
        elif kind_b == "prefix_lm":
            param = slider("Prefix p", 0, t, "prefix", min(t // 2, t), where=c2)
        elif kind_b == "padding":
            param = slider("Padding tokens n", 0, max(0, t - 1), "pad", min(3, t - 1), where=c2)
        n_layers, n_heads = len(cap_a.sites(group)), cap_a.n_heads
        layer = index("Layer", n_layers, "layer", 0, where=c3)
        head = index("Head", n_heads, "head", 0, where=c4)
    mask_b = (kind_b,) if param is None else (kind_b, int(param))
    cap_b = inp.capture(mask_b)
    qt, kt = cap_a.group_tokens(group)
    site = cap_a.sites(group)[layer]
    ra, rb = cap_a.records[site], cap_b.records[site]
    ma, mb = ra.mask_for(), rb.mask_for()
    pa, pb = ra.pattern(head), rb.pattern(head)

    if layer > 0:
        st.caption(f"Layer {layer} reads the output of the layers below, which the mask also changed: its inputs "
                   "differ between the two runs. Layer 0 shows the pure effect of the mask on the same scores.")
    for label, kind in (("A", base), ("B", kind_b)):
        st.markdown(f"**{label}: {NAMES[kind]}** — {ASSUMES[kind]}")
    rows = [run_panels("A", cap_a, group), run_panels("B", cap_b, group)]
    layers = panel_layers(rows, n_layers, n_heads, len(qt), len(kt), layer, PANEL["png_cells"])
    chart(panel_grid(rows, qt, kt, layer, head, n_heads, layers, present=present, max_ticks=16, **PANEL),
          key="panels", name=f"masks-L{layer}H{head}")
    switch_caption(layers, "all six panels", "the difference below and the downloads")
    st.caption("Scores: red = positive, blue = negative; weights: darker = larger (0 to the largest weight); "
               "grey = masked. Hover any cell for its tokens and value.")
    st.subheader("Difference B − A")
    c1, c2 = (st.container(), st.container()) if present else st.columns([3, 2])  # a projector: one under the other
    with c1:
        chart(matrix_heatmap(pb - pa, qt, kt, mask=ma | mb, kind="diff", present=present,
                             title=f"layer {layer}, head {head}: weights B − A"), key="diff", width=None if present else column_px([3, 2], False)[0], name="diff")
    with c2:
        stack_a, stack_b = cap_a.matrices(group), cap_b.matrices(group)
        dmax = np.abs(stack_b - stack_a).max(axis=(-2, -1))  # [L, H]
        kv_group = cap_a.layer_records(group)[0].kv_group  # query heads per shared k/v head
        chart(grid_heatmap(dmax, [f"layer {i}" for i in range(n_layers)], head_names(n_heads, kv_group),
                           diverging=False, title="max |Δ weight| per head", value_name="max |Δ|", present=present,
                           kv_group=kv_group),
              key="dmax", width=None if present else column_px([3, 2], False)[1], name="max-diff")

    with st.expander("Why −∞ before the softmax, not zero after?", expanded=False):
        r, m, kind = (rb, mb, kind_b) if not mb.all() or ma.all() else (ra, ma, base)  # a mask that hides something
        v = zero_after_softmax_vs_neg_inf(r.scores(head), m)
        sums = v.zero_after.sum(-1)  # [q]: each row's sum
        if m.all():
            st.markdown(f"Neither mask hides a key here ({NAMES[base]} and {NAMES[kind_b]}): there is nothing to zero. "
                        "Compare with a causal or sliding-window mask to see the difference.")
        else:
            st.markdown(f"With the {NAMES[kind]} mask, zeroing masked weights *after* the softmax leaves rows that sum "
                        f"to less than 1 (here as low as **{sums.min():.3f}**) because the masked keys were in the "
                        f"denominator. Re-normalising fixes it (max difference to −∞-before-softmax: "
                        f"{np.abs(v.zero_renorm - v.neg_inf).max():.2e}).")
        chart(token_bars(sums, qt, title=f"Row sums when zeroing after the softmax ({NAMES[kind]} mask)",
                         present=present, name="row sum"), key="rowsums", name="row-sums")

    bundled = bundled_names()
    if "lecture-decoder" in bundled and "lecture-encoder" in bundled:
        st.subheader("Trained causal vs trained bidirectional attention")
        text = inp.text if inp.model in ("lecture-decoder", "lecture-encoder") else presets("lecture-decoder")[0].text
        st.caption(f"The bundled decoder and encoder were trained on the same corpus; here both read: "
                   f"{md(text, 600)}.")  # as typed: not Markdown (`&amp;`, `$5`, `**`)
        with guard():
            cols = wrapping_columns(2, "masks-trained", PAIR_PX)  # one under the other on a projector
            for col, name in zip(cols, ("lecture-decoder", "lecture-encoder")):
                c = state.capture(name, text, None, inp.backend)
                g = next(iter(c.groups()))
                lyr = min(layer, len(c.sites(g)) - 1)
                hd = min(head, c.n_heads - 1)
                tq, tk = c.group_tokens(g)
                with col:
                    chart(matrix_heatmap(c.records[c.sites(g)[lyr]].pattern(hd), tq, tk, mask=c.mask_of(g),
                                         title=f"{name}: layer {lyr}, head {hd}", present=present),
                          key=f"trained-{name}", width=column_px(2, present, min_width=PAIR_PX)[0], name=name)

    downloads(f"masks-L{layer}H{head}", csv=matrix_csv(pb - pa, qt, kt),
              npz={"mask_a": ma, "mask_b": mb, "pattern_a": pa, "pattern_b": pb, "scores": ra.scores(head),
                   "max_abs_diff": dmax, "tokens": qt},
              json_obj={"model": inp.model, "text": inp.text, "mask_a": base, "mask_b": list(mask_b), "layer": layer,
                        "head": head, "max_abs_diff_per_head": dmax})
