"""A head matrix the browser switches itself: matrix_heatmap carrying the other heads (of every layer that fits
a byte budget) as hidden traces, with Plotly buttons for head and layer — no server round trip."""

from __future__ import annotations

import plotly.graph_objects as go
from attnlab.app.figures.matrix import MAX_SIDE, PNG_CELLS, masked, matrix_heatmap, png_of, png_scale, zlimits
from attnlab.app.figures.style import DIVERGING, THEME_SCALE

SWITCH_BYTES = 600_000  # float32 bytes of heads one head matrix may carry for switching in the browser
SWITCH_PNG_BYTES = 400_000  # the same for heads sent as PNG data URIs (a page's payload stays under 2 MB)


def switch_layers(n_layers: int, n_heads: int, nq: int, nk: int, layer: int, budget: int = SWITCH_BYTES):
    """The layers whose heads a head matrix carries: all when they fit `budget` (float32 bytes), else the
    shown layer's, else None (too large: pooled, or over budget; the server switches). Matrices sent as PNGs:
    every layer, which head_switcher trims to what its encoded images fit."""
    if max(nq, nk) > MAX_SIDE:
        return None
    if nq * nk > PNG_CELLS:  # PNGs: their size is known once encoded, so head_switcher keeps what fits
        return list(range(n_layers))
    per_layer = n_heads * nq * nk * 4
    return list(range(n_layers)) if per_layer * n_layers <= budget else [layer] if per_layer <= budget else None


def head_switcher(stack, q_tokens, k_tokens, layer: int, head: int, layers, *, mask=None, kind: str = "pattern",
                  name=lambda layer, head: f"layer {layer}, head {head}", budget: int = SWITCH_BYTES,
                  **kw) -> go.Figure:
    """matrix_heatmap of stack[layer, head] ([L, H, q, k]) carrying every head of `layers` as one trace each
    (hidden but the shown one, trace 0, which is matrix_heatmap's own), with Plotly buttons for the head (and the
    layer, if several) that switch the visible trace in the browser: trace i is head `meta.heads[i]` =
    (layer, head), its z exactly stack[layer, head] (NaN where masked), its colour range its own as
    matrix_heatmap gives it (or `zrange` for all); only trace 0 has per-cell token labels in its hover. Matrices
    sent as PNGs (above png_cells): one image per head, as many whole layers as fit SWITCH_PNG_BYTES (or a
    smaller `budget`)."""
    fig = matrix_heatmap(stack[layer, head], q_tokens, k_tokens, mask=mask, kind=kind, title=name(layer, head), **kw)
    base = fig.data[0]
    n_heads = stack.shape[1]
    if base.type == "image":
        return _png_switcher(fig, stack, layer, head, layers, mask, kind, name, kw.get("zrange"),
                             min(budget, SWITCH_PNG_BYTES))
    pairs = [(layer, head)] + [(lyr, h) for lyr in layers for h in range(n_heads) if (lyr, h) != (layer, head)]
    # the other heads share one template without per-cell token labels (they would be copied once per head; the
    # tick labels name the tokens), so they cost little to build and to send; the shown head keeps its labels
    spec = {k: v for k, v in base.to_plotly_json().items() if k not in ("z", "text", "zmin", "zmax")}
    spec["hovertemplate"] = spec["hovertemplate"].replace("<br>%{text}", "")
    traces = [base.update(name=f"L{layer}H{head}", visible=True)]
    for lyr, h in pairs[1:]:
        z = masked(stack[lyr, h], mask)  # [q, k]
        zmin, zmax = kw.get("zrange") or zlimits(z, kind)
        traces.append(spec | {"z": z, "zmin": zmin, "zmax": zmax, "visible": False, "name": f"L{lyr}H{h}"})
    fig.data = ()
    fig.add_traces(traces)
    return _buttons(fig, pairs, layer, head, layers, n_heads, name)


def _png_switcher(fig, stack, layer, head, layers, mask, kind, name, zrange, budget: int = SWITCH_PNG_BYTES):
    """head_switcher for matrices sent as PNGs: one image trace per head (colour range its own), the shown
    layer first and then whole layers while their encoded images fit `budget`; none fits: the plain figure."""
    base = fig.data[0]
    spec = {k: v for k, v in base.to_plotly_json().items() if k != "source"}
    scale = (THEME_SCALE if kind == "pattern" else DIVERGING) or png_scale()  # as matrix_heatmap colours it
    n_heads = stack.shape[1]
    pngs, used, kept = {(layer, head): base.source}, len(base.source), []
    for lyr in [layer] + [x for x in layers if x != layer]:
        new = {}
        for h in range(n_heads):
            if (lyr, h) not in pngs:
                z = masked(stack[lyr, h], mask)  # [q, k]
                new[(lyr, h)] = png_of(z, scale, *(zrange or zlimits(z, kind)))
        size = sum(len(v) for v in new.values())
        if used + size > budget:
            break
        pngs |= new
        used += size
        kept.append(lyr)
    if not kept:
        return fig
    kept.sort()
    pairs = [(layer, head)] + [(lyr, h) for lyr in kept for h in range(n_heads) if (lyr, h) != (layer, head)]
    fig.data = ()
    fig.add_traces([base.update(visible=True, name=f"L{layer}H{head}")] + [
        spec | {"source": pngs[p], "visible": False, "name": f"L{p[0]}H{p[1]}"} for p in pairs[1:]])
    return _buttons(fig, pairs, layer, head, kept, n_heads, name)


def _buttons(fig, pairs, layer, head, layers, n_heads, name, owners=None, lift: int = 0):
    """The head (and layer) button rows that switch the visible traces in the browser: trace i belongs to the
    heads owners[i] (a set of (layer, head); None: always shown), by default trace i to pairs[i] alone. The rows
    sit `lift` px higher than the plot area's top (room for panel titles)."""
    owners = [{p} for p in pairs] if owners is None else owners

    def vis(lyr, h):
        return [o is None or (lyr, h) in o for o in owners]

    n_hm = len(layers)  # menus 0..n_hm−1: the heads of each layer; then, if several layers, the layers per head
    head_menu = {lyr: i for i, lyr in enumerate(layers)}
    layer_menu = {h: n_hm + h for h in range(n_heads)} if len(layers) > 1 else {}
    row = {"type": "buttons", "direction": "right", "x": 0, "xanchor": "left", "yanchor": "bottom",
           "pad": {"t": 2, "b": 2}, "showactive": True, "font": {"size": 11}}

    def show(lyr, h):  # the layout update of a switch to (lyr, h): title, which rows are visible, their active
        out = {"title.text": f"<b>{name(lyr, h)}</b>"}  # bold, as Streamlit's theme draws the first title
        for other, k in head_menu.items():
            out[f"updatemenus[{k}].visible"] = other == lyr
        out[f"updatemenus[{head_menu[lyr]}].active"] = h
        for other, k in layer_menu.items():
            out[f"updatemenus[{k}].visible"] = other == h
        if layer_menu:
            out[f"updatemenus[{layer_menu[h]}].active"] = layers.index(lyr)
        return out

    top = (130 if layer_menu else 100) + lift
    plot_px = max(120, (fig.layout.height or 450) - top - (fig.layout.margin.b or 0))  # the plot area's height
    menus = [row | {"name": "head", "y": 1 + lift / plot_px, "visible": lyr == layer, "active": head,
                    "buttons": [{"label": f"head {h}", "name": f"{lyr},{h}", "method": "update",
                                 "args": [{"visible": vis(lyr, h)}, show(lyr, h)]}
                                for h in range(n_heads)]} for lyr in layers]
    menus += [row | {"name": "layer", "y": 1 + (lift + 34) / plot_px, "visible": h == head, "active": layers.index(layer),
                     "buttons": [{"label": f"layer {lyr}", "name": f"{lyr},{h}", "method": "update",
                                  "args": [{"visible": vis(lyr, h)}, show(lyr, h)]} for lyr in layers]}
              for h in layer_menu]
    fig.update_layout(updatemenus=menus, margin={"t": top},
                      meta=fig.layout.meta | {"heads": [list(p) for p in pairs]})
    fig.layout.title.update(y=0.995, yanchor="top")
    return fig
