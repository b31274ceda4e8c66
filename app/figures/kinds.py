"""The three kinds of attention side by side, as one encoder–decoder computes them on one sentence pair: the
decoder's causal self-attention (target × target, nothing above the diagonal), the cross-attention (target ×
source, every cell) and the encoder's bidirectional self-attention (source × source, every cell) — one weight
scale for the three."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import THEME_SCALE, apply_layout, esc, font_size, tick_labels, wrap
from plotly.subplots import make_subplots

PANELS = ("causal", "cross", "bidirectional")
SPACING = 0.035  # between panels, a share of the plot width
MARGIN = {"l": 60, "r": 16}  # px: the target labels on the left, nothing on the right


def three_kinds(causal, cross, bidirectional, target, source, *, title: str = "", present: bool = False,
                height: int = 460, width: int = 540, cells=()) -> go.Figure:
    """Weights [T, T], [T, S] and [S, S] (rows: queries) in three square-celled panels; `target` and `source`
    name the T and S tokens; `cells` (row, column) of the cross panel are circled (a reference alignment). The
    causal and cross panels share their rows (target queries, named on the left); cross and bidirectional share
    their columns. The tick font shrinks until one label fits a cell of a `width`-px figure."""
    mats = [np.asarray(m, dtype=np.float64) for m in (causal, cross, bidirectional)]
    tgt, src = tick_labels(target, 10), tick_labels(source, 10)
    axes = [(tgt, tgt), (tgt, src), (src, src)]  # (rows, columns) of each panel
    widths = np.array([m.shape[1] for m in mats], dtype=float)
    fig = make_subplots(rows=1, cols=3, column_widths=list(widths / widths.sum()), horizontal_spacing=SPACING,
                        subplot_titles=("decoder self<br>causal", "cross<br>target → source",
                                        "encoder self<br>bidirectional"))
    for i, (m, (rows, cols), name) in enumerate(zip(mats, axes, PANELS), 1):
        hover = np.array([[f"{esc(r, 20)} → {esc(c, 20)}" for c in cols] for r in rows], dtype=object)
        fig.add_trace(go.Heatmap(z=m, x=np.arange(m.shape[1]), y=np.arange(m.shape[0]), zmin=0.0, zmax=1.0,
                                 colorscale=THEME_SCALE, showscale=False, name=name, customdata=hover, xgap=1, ygap=1,
                                 hovertemplate="%{customdata}<br>weight %{z:.3f}<extra>" + name + "</extra>"),
                      row=1, col=i)
    cells = list(cells)
    if cells:
        fig.add_trace(go.Scatter(x=[c for _, c in cells], y=[r for r, _ in cells], mode="markers", showlegend=False,
                                 name="reference alignment", hovertemplate="reference: row %{y} ↔ source %{x}"
                                 "<extra></extra>", marker={"symbol": "circle-open", "size": 11, "color": "#ff7f0e",
                                                            "line": {"width": 2}}), row=1, col=2)
    cell = (width - MARGIN["l"] - MARGIN["r"]) * (1 - 2 * SPACING) / widths.sum()  # px per cell (square cells)
    size = max(8, min(font_size(present) - 3, int(cell / 1.35)))  # a label's box is ~1.3 × its font size
    axis = {"showgrid": False, "zeroline": False, "tickmode": "array", "tickfont": {"size": size},
            "ticklabeloverflow": "allow", "constrain": "domain", "fixedrange": True}
    for i, (m, (rows, cols)) in enumerate(zip(mats, axes), 1):
        name = {"text": "source" if i > 1 else "target", "standoff": 4, "font": {"size": size + 3}}
        fig.update_xaxes(axis | {"tickvals": list(range(m.shape[1])), "ticktext": cols, "tickangle": -90,
                                 "range": [-0.5, m.shape[1] - 0.5], "title": name}, row=1, col=i)
        fig.update_yaxes(axis | {"tickvals": list(range(m.shape[0])), "ticktext": rows,
                                 "range": [m.shape[0] - 0.5, -0.5],
                                 "scaleanchor": f"x{i if i > 1 else ''}", "scaleratio": 1, "constraintoward": "top",
                                 "showticklabels": i == 1},
                         row=1, col=i)
    for a in fig.layout.annotations:  # the panels' titles
        a.font = {"size": font_size(present) - (4 if present else 1)}
    apply_layout(fig, wrap(title, 500, present), present, height, top=80 if title else 50)
    fig.update_layout(margin={**MARGIN, "b": 70}, plot_bgcolor="rgba(0,0,0,0)",
                      meta={"panels": list(PANELS), "shapes": [list(m.shape) for m in mats]})
    return fig
