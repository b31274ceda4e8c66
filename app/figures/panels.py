"""Matrix panels that switch head and layer together, in the browser: one figure with one square subplot per
panel (Masks: mask | scores | weights of the same head, one row per mask) and the head switcher's buttons."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.matrix import masked, matrix_heatmap, zlimits
from attnlab.app.figures.style import MAIN_PX, PRINT_PX, font_size, layout
from attnlab.app.figures.switcher import SWITCH_BYTES, _buttons, switch_layers

TITLE_PX = 28  # the band above each row of panels that holds their titles
PANEL_PX = 360  # the height of one row of panels (each panel a square at most this high)
NOTE_CHAR = 0.58  # a panel title's character width over its font size, at most (0.55 measured on the scores' title)


@dataclass(frozen=True)
class Panel:
    """One panel: its title, and of(layer, head) → (matrix [q, k], mask [q, k] or None) as matrix_heatmap takes
    them. `per_head` False: the panel depends on the layer only (a mask)."""

    title: str
    of: Callable[[int, int], tuple[np.ndarray, np.ndarray | None]]
    kind: str = "pattern"
    zrange: tuple[float, float] | None = None
    per_head: bool = True
    short: str = ""  # the title where the panel is too narrow for `title`


def run_panels(label: str, cap, group: str) -> list[Panel]:
    """The mask, the masked scores and the weights of one captured run's group, for any (layer, head)."""
    def rec(lyr):
        return cap.records[cap.sites(group)[lyr]]

    def ones(lyr):  # every cell 1, masked cells NaN: the mask in the weights' colours
        m = rec(lyr).mask_for()
        return np.ones(m.shape, np.float32), m

    return [Panel(f"{label}: mask (grey = hidden)", lambda lyr, h: ones(lyr), zrange=(0, 1), per_head=False,
                  short=f"{label}: mask"),
            Panel(f"{label}: scores with −∞ where masked", lambda lyr, h: (rec(lyr).masked_scores(h), None),
                  kind="scores", short=f"{label}: scores (−∞ masked)"),
            Panel(f"{label}: attention weights", lambda lyr, h: (rec(lyr).pattern(h), rec(lyr).mask_for()),
                  short=f"{label}: weights")]


def panel_layers(rows: list[list[Panel]], n_layers: int, n_heads: int, nq: int, nk: int, layer: int,
                 png_cells: int, budget: int = SWITCH_BYTES):
    """The layers whose heads the panels of `rows` carry (switch_layers for their per-head panels), or None: the
    server switches (the panels are PNGs or pooled, or one layer's heads do not fit `budget`)."""
    if nq * nk > png_cells:
        return None
    per_head = sum(p.per_head for r in rows for p in r)
    return switch_layers(n_layers, n_heads * max(1, per_head), nq, nk, layer, budget)


def panel_grid(rows: list[list[Panel]], q_tokens, k_tokens, layer: int, head: int, n_heads: int, layers,
               *, present: bool = False, name=lambda layer, head: f"layer {layer}, head {head}", **kw) -> go.Figure:
    """Every panel of `rows` for (layer, head), each drawn by matrix_heatmap (`kw`: its options), in one figure.
    With `layers` (panel_layers), the figure also carries each panel of every head of those layers as a hidden
    trace (z exactly as matrix_heatmap gives it, without per-cell token labels) and the head and layer buttons
    switch all panels at once; trace i belongs to the heads in meta.owners[i] (None: every head)."""
    cols = max(len(r) for r in rows)
    def draw(p: Panel) -> go.Figure:
        m, mask = p.of(layer, head)
        return matrix_heatmap(m, q_tokens, k_tokens, mask=mask, kind=p.kind, zrange=p.zrange, present=present,
                              showscale=False, **kw)

    figs = [[draw(p) for p in r] for r in rows]
    first = figs[0][0].layout
    pairs = [(layer, head)]
    if layers:
        pairs += [(lyr, h) for lyr in layers for h in range(n_heads) if (lyr, h) != (layer, head)]
    several = layers and len(layers) > 1
    top = (130 if several else 100 if layers else 60) + TITLE_PX
    gap = first.margin.b + TITLE_PX  # x tick labels of one row, then the titles of the next
    side = min(PANEL_PX, int((MAIN_PX[present] - first.margin.l - 20) / cols))  # px: a square panel's side
    pitch = (min(MAIN_PX[present], PRINT_PX) - first.margin.l - 16) / cols  # px from one title's start to the next's
    plot_px = len(rows) * side + (len(rows) - 1) * gap
    traces, owners, axes, notes = [], [], {}, []
    for r, (row, row_figs) in enumerate(zip(rows, figs)):
        y1 = 1 - r * (side + gap) / plot_px
        for c, (p, f) in enumerate(zip(row, row_figs)):
            n = r * cols + c + 1
            xa, ya = f"xaxis{n if n > 1 else ''}", f"yaxis{n if n > 1 else ''}"
            x, y = f"x{n if n > 1 else ''}", f"y{n if n > 1 else ''}"
            axes[xa] = f.layout.xaxis.to_plotly_json() | {"domain": [c / cols + 0.01, (c + 1) / cols - 0.02],
                                                           "anchor": y, "constraintoward": "left"}
            axes[ya] = f.layout.yaxis.to_plotly_json() | {"domain": [max(0.0, y1 - side / plot_px), y1], "anchor": x,
                                                           "constraintoward": "top", "showticklabels": c == 0,
                                                           "scaleanchor": x, **({} if c == 0 else {"title": None})}
            fits = len(p.title) * NOTE_CHAR * font_size(present) <= pitch - 8
            notes.append({"text": p.title if fits or not p.short else p.short, "xref": f"{x} domain", "yref": f"{y} domain", "x": 0, "y": 1,
                          "xanchor": "left", "yanchor": "bottom", "yshift": 4, "showarrow": False,
                          "font": {"size": font_size(present)}})
            base = f.data[0].update(xaxis=x, yaxis=y, name=f"{p.title} · L{layer}H{head}", visible=True,
                                    hovertemplate=f"{p.title}<br>" + (f.data[0].hovertemplate or ""))
            owners.append({q for q in pairs if (q == (layer, head) if p.per_head else q[0] == layer)})
            traces.append(base)
            if len(pairs) > 1:
                _hidden(p, base, pairs, layer, traces, owners)
    owners = [None if o == set(pairs) else o for o in owners]  # shown for every head: no switching
    lay = layout(name(layer, head), present, top + plot_px + first.margin.b, annotations=notes,
                 plot_bgcolor=first.plot_bgcolor, meta={"owners": [None if o is None else sorted(map(list, o))
                                                                   for o in owners], "panels": [p.title for r in rows for p in r]})
    lay["margin"] |= {"l": first.margin.l, "b": first.margin.b, "t": top}  # room for labels, titles and buttons
    lay["margin"]["autoexpand"] = False  # so nothing pushes them: one draw per change, not two
    fig = go.Figure(traces, lay | axes, _validate=len(pairs) == 1)  # dozens of traces: validation was ~2/3 of it
    if len(pairs) == 1:
        return fig
    return _buttons(fig, pairs, layer, head, layers, n_heads, name, owners=owners, lift=TITLE_PX)


def _hidden(p: Panel, base, pairs, layer: int, traces: list, owners: list) -> None:
    """Append panel p's hidden traces for the other heads of `pairs` (the last trace is its shown one), each
    owned by the heads that show it; a panel that is not per head gets one per layer, or none where the layer's
    matrix equals the shown one (whose owners then include that layer's heads)."""
    i_base = len(traces) - 1
    spec = {k: v for k, v in base.to_plotly_json().items() if k not in ("z", "text", "zmin", "zmax", "visible")}
    spec["hovertemplate"] = spec["hovertemplate"].replace("<br>%{text}", "")
    shown = np.asarray(base.z, dtype=np.float32)
    keys = pairs[1:] if p.per_head else sorted({lyr for lyr, _ in pairs} - {layer})
    for key in keys:
        lyr, h = key if p.per_head else (key, pairs[0][1])
        z = masked(*p.of(lyr, h))  # [q, k]
        own = {key} if p.per_head else {q for q in pairs if q[0] == key}
        if not p.per_head and np.array_equal(z, shown, equal_nan=True):  # this layer's mask: the shown one
            owners[i_base] |= own
            continue
        zmin, zmax = p.zrange or zlimits(z, p.kind)
        traces.append(spec | {"z": z, "zmin": zmin, "zmax": zmax, "visible": False, "name": f"{p.title} · L{lyr}H{h}"})
        owners.append(own)
