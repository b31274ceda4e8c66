"""Heatmaps (/heatmaps): every layer × head at once, one head up close, and the head view."""

import streamlit as st
from attnlab.analysis.attention.pooling import window
from attnlab.analysis.attention.rollout import fuse_heads
from attnlab.analysis.attention.stepwise import neuron_view
from attnlab.app import state
from attnlab.app.chart_link import anchor, link
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.grids import neuron_grid
from attnlab.app.figures.head_view import head_view, head_view_title
from attnlab.app.figures.matrix import MAX_SIDE, matrix_heatmap
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.figures.style import md
from attnlab.app.figures.switcher import head_switcher, switch_layers
from attnlab.app.frame import chart, guard, options, page, presenting, switch_caption
from attnlab.app.inputs import inputs, lacks
from attnlab.app.presets import default_query, source_index
from attnlab.app.url_state import group_select, index, range_slider, select, sync_url, toggle, token_select
from attnlab.model.captured import GROUP_LABELS

KINDS = {"pattern": "attention weights (softmax)", "scores": "raw scores (scaled QKᵀ, before the mask)",
         "masked": "masked scores (what the softmax sees)"}
FUSE = {"none": "every head", "mean": "mean over heads", "max": "max over heads"}


@st.fragment
def close_up(cap, inp, group, kind, fuse, shown, vmask, vkind, present):
    """One head: its matrix, the head view and a zoom window. A fragment: its widgets rerun only this part,
    so the mosaic above is not rebuilt or redrawn when the head changes. In presentation mode the matrix takes
    the full width, its ticks read "i token", and the head view goes below it."""
    qt, kt = cap.group_tokens(group)
    n_layers, n_heads = len(cap.sites(group)), cap.n_heads
    with guard():
        c1, c2, c3 = st.columns(3)
        layer = index("Layer", n_layers, "layer", n_layers - 1, where=c1)
        head = 0 if fuse != "none" else index("Head", n_heads, "head", 0, where=c2)
        q_default = default_query(cap, inp.preset) if group != "encoder" else len(qt) - 1
        query = token_select("Query token (head view)", qt, "query", min(q_default, len(qt) - 1), where=c3)
        src = source_index(cap, inp.preset) if group != "cross" and group != "encoder" else None
        m = shown[layer, head]
        big = max(m.shape) > MAX_SIDE
        pool = select("Pooling of large matrices", ("max", "mean"), "pool", "max", show=big and not present,
                      horizontal=True)
        left, right = (st.container(), st.container()) if present else st.columns([3, 2], gap="medium")
        name = f"layer {layer}, " + (f"head {head}" if fuse == "none" else FUSE[fuse])
        with left:
            al, ah = anchor("head", layer, head)  # after a press of the chart's own buttons: the head it was built on
            layers = switch_layers(n_layers, n_heads, *m.shape, al) if fuse == "none" else None
            if layers:  # the chart carries these layers' heads: its own buttons switch them, and the page follows
                fig1 = head_switcher(shown, qt, kt, al, ah, layers, mask=vmask, kind=vkind, present=present,
                                     mark=(query, src), index_ticks=present)
                chart(fig1, key="head", width=None if present else column_px([3, 2], False, "medium")[0], name="head-matrix")
                link("head")
            else:
                chart(matrix_heatmap(m, qt, kt, mask=vmask, kind=vkind, title=name, present=present, pool=pool,
                                     mark=(query, src), index_ticks=present), key="head", width=None if present else column_px([3, 2], False, "medium")[0], name=f"head-{layer}-{head}")
            switch_caption(layers, "it")
            if big:
                st.info(f"This {m.shape[0]}×{m.shape[1]} matrix is pooled ({pool}) to at most {MAX_SIDE} cells "
                        "per side; the zoom window below shows any region at full resolution.")
        with right:
            heads = list(range(n_heads)) if fuse == "none" else [0]
            pats = cap.matrices(group) if fuse == "none" else fuse_heads(cap.matrices(group), fuse)[:, None]  # [L, H or 1, q, k]
            hv_heads = select("Head view shows", ["selected", "all"], "hv", "selected", horizontal=True,
                              format_func=lambda v: "the selected head" if v == "selected" else "all heads")
            one = hv_heads == "selected" and fuse == "none"
            fig2 = head_view(pats[layer], qt, kt, query, [head] if hv_heads == "selected" else heads,
                             present=present, title=head_view_title(query, layer, head if one else None))
            chart(fig2, key="headview", width=None if present else column_px([3, 2], False, "medium")[1], name="head-view")
            st.caption("Line strength = attention weight (of the pattern, whatever matrix is shown on the left).")

        if toggle("Zoom window (full resolution)", "zoom", big, show=not present or big):
            nq, nk = m.shape
            span = min(64, nq), min(64, nk)
            q0 = max(0, min(query - span[0] // 2, nq - span[0]))
            zq = range_slider("Query rows", 0, nq - 1, "zoom_q", (q0, q0 + span[0] - 1))
            zk = range_slider("Key columns", 0, nk - 1, "zoom_k", (0, span[1] - 1))
            win = window(m, zq[0], zq[1] + 1, zk[0], zk[1] + 1)
            wmask = None if vmask is None else window(vmask, zq[0], zq[1] + 1, zk[0], zk[1] + 1)
            chart(matrix_heatmap(win, qt, kt, mask=wmask, kind=vkind, title=f"{name}: rows {zq[0]}–{zq[1]}, "
                                 f"keys {zk[0]}–{zk[1]}", present=present, q_offset=zq[0],
                                 k_offset=zk[0], max_side=10**6, index_ticks=present), key="zoom", name="zoom")

        nv = None
        if fuse == "none" and not lacks(inp.model, "has_qk", "neuron view reads q and k"):  # one score of this head, dimension by dimension, from the record itself
            st.markdown(f"**One score, neuron by neuron** — layer {layer}, head {head}, "
                        f"query {query} · {md(qt[query])}")
            rec = cap.layer_records(group)[layer]
            best = int(rec.pattern(head, (query, query + 1, 0, rec.k_len))[0].argmax())
            key = token_select("Key token", kt, "nv_key", best, help="Default: the key this query attends to most.")
            nv = neuron_view(rec, head, query, key)
            chart(neuron_grid(nv["q"], nv["k"], nv["product"], present=present,
                              title=f"q (query {query}), k (key {key}) and q⊙k"),
                  key="neuron", name=f"neuron-L{layer}H{head}-q{query}-k{key}")
            bias = f" + bias {nv['bias']:.4f}" if nv["bias"] else ""
            root = f"1/√{nv['d_head']} = " if abs(nv["scale"] * nv["d_head"] ** 0.5 - 1) < 1e-6 else ""
            st.markdown(f"Σ q⊙k = **{nv['raw']:.4f}** (the raw score q·k) · scale {root}{nv['scale']:.4f}{bias}"
                        f" → scaled score **{nv['scaled']:.4f}** → weight **{nv['weight']:.4f}**"
                        + (" (masked: this key is hidden from the query)" if nv["masked"]
                           else " (softmax over the query's row)"))
        elif fuse != "none":
            st.caption("The neuron view (q, k and q⊙k of one query/key pair) needs one head: choose 'every head'.")
        downloads(f"{group}-{kind}-L{layer}H{head}", csv=matrix_csv(m, qt, kt),
                  npz={"matrices": shown, "mask": cap.mask_of(group), "q_tokens": qt, "k_tokens": kt},
                  json_obj={"model": inp.model, "text": inp.text, "group": group, "kind": kind, "fuse": fuse,
                            "layer": layer, "head": head, "q_tokens": qt, "k_tokens": kt, "matrix": m,
                            "neuron_view": nv})
    sync_url()


with page("Heatmaps", "Which heads look where? Every layer and head at once, then one up close."):
    inp = inputs()
    cap = inp.capture()
    present = presenting()
    groups = cap.groups()
    with options():
        c1, c2, c3 = st.columns(3) if len(groups) > 1 else (None, *st.columns(2))
        group = group_select(groups, where=c1)
        kinds = list(KINDS) if state.model_info(inp.model)["can"].has_qk else ["pattern"]  # a view: weights only
        kind = select("Matrix", kinds, "kind", "pattern", where=c2, format_func=KINDS.get)
        fuse = select("Heads", list(FUSE), "fuse", "none", where=c3, format_func=FUSE.get)
    qt, kt = cap.group_tokens(group)
    stack = cap.matrices(group, kind)  # [L, H, q, k]
    mask = cap.mask_of(group)
    n_layers, n_heads = stack.shape[:2]
    if fuse != "none":
        stack = fuse_heads(stack, fuse)[:, None]  # [L, 1, q, k]
    shown = stack
    vmask = mask if kind != "scores" else None  # raw scores are shown unmasked, by definition
    vkind = "pattern" if kind == "pattern" else "scores"

    title = f"{GROUP_LABELS.get(group, group)} — {KINDS[kind]}" + ("" if fuse == "none" else f", {FUSE[fuse]}")
    first = cap.layer_records(group)[0]
    kv_group = n_heads // first.n_kv_heads if fuse == "none" else 1  # query heads per shared k/v head
    fig = mosaic(shown, qt, kt, mask=vmask, kind=vkind, title=title, present=present,
                 layer_labels=[f"layer {i}" for i in range(n_layers)], kv_group=kv_group)
    chart(fig, key="mosaic", name="mosaic")
    st.caption("Rows are layers, columns heads; inside each block rows are query tokens and columns key tokens. "
               "Blank cells are masked. Hover for layer, head, tokens and value."
               + (f" Grouped-query attention: each run of {kv_group} heads shares one key/value head (kv n)."
                  if kv_group > 1 else ""))

    st.subheader("One head up close")
    close_up(cap, inp, group, kind, fuse, shown, vmask, vkind, present)
