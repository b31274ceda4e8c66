"""One query row of a head as vectors (analysis.probes.head_vectors): the query q above the keys k_j, the scaled scores
and their softmax α beside them, the values v_j, and under them the output Σ α_j v_j with the model's own output
— d_head-wide heatmap strips, each kind of number on its own colour scale."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.fit import LINE_H
from attnlab.app.figures.style import DIVERGING, THEME_SCALE, apply_layout, esc, font_size, wrap
from plotly.subplots import make_subplots

COLUMNS = (0.4, 0.07, 0.07, 0.4)  # share of the width: K (and q), score, α, V (and the output)
PLOT_SHARE = 0.78  # the key rows' share of the plot height (q above, the two output rows below)


def _lim(*arrays) -> float:
    return float(max(np.abs(a).max() for a in arrays)) or 1.0


def key_ticks(weights: np.ndarray, rows_px: float, font: int) -> list[int]:
    """Row indices to label: the heaviest keys first, each at least one label's height from those already kept."""
    gap = LINE_H * font / max(rows_px, 1e-6)  # rows a label needs
    kept: list[int] = []
    for i in np.argsort(weights)[::-1]:
        if all(abs(int(i) - j) >= gap for j in kept):
            kept.append(int(i))
    return sorted(kept)


def qkv_strips(hv, tokens, *, title: str = "", present: bool = False, height: int = 460) -> go.Figure:
    """q, K, scores, α, V and Σ α v (with the model's z) of `hv` (an analysis.probes.head_vectors.HeadVectors);
    `tokens` name the positions. Data rows of the K, score, α and V panels are hv.keys in order."""
    n, d = hv.k.shape
    labels = [f"{int(j)} {tokens[int(j)]}" for j in hv.keys]
    fig = make_subplots(rows=3, cols=4, column_widths=list(COLUMNS), horizontal_spacing=0.012, vertical_spacing=0.03,
                        row_heights=[(1 - PLOT_SHARE) * 0.3, PLOT_SHARE, (1 - PLOT_SHARE) * 0.7],
                        specs=[[{}, None, None, None], [{}, {}, {}, {}], [None, None, None, {}]])
    dims, rows = np.arange(d), np.arange(n)
    qk, vz = _lim(hv.q, hv.k), _lim(hv.v, hv.output, hv.z)

    def strip(z, y, lo, hi, scale, name, row, col, names):  # names: one hover label per row of z
        hover = np.array([[f"{name} · {esc(r, 20)}" + (f" · dim {c}" if z.shape[1] > 1 else "") for c in
                           range(z.shape[1])] for r in names], dtype=object)
        fig.add_trace(go.Heatmap(z=z, x=dims if z.shape[1] == d else [0], y=y, zmin=lo, zmax=hi, colorscale=scale,
                                 showscale=False, name=name, customdata=hover,
                                 hovertemplate="%{customdata}<br>%{z:.4f}<extra></extra>"), row=row, col=col)

    strip(hv.q[None, :], [0], -qk, qk, DIVERGING, "q", 1, 1, [f"query {hv.query}"])
    strip(hv.k, rows, -qk, qk, DIVERGING, "k", 2, 1, labels)
    finite = hv.scores[np.isfinite(hv.scores)]
    strip(hv.scores[:, None], rows, float(finite.min()), float(finite.max()), THEME_SCALE, "q·k/√d", 2, 2, labels)
    strip(hv.weights[:, None], rows, 0.0, 1.0, THEME_SCALE, "α", 2, 3, labels)
    strip(hv.v, rows, -vz, vz, DIVERGING, "v", 2, 4, labels)
    out = np.stack([hv.output, hv.z])  # [2, d]: Σ α v written out, the model's own hook_z
    strip(out, [0, 1], -vz, vz, DIVERGING, "output", 3, 4, ["Σ α·v", "the model's z"])
    size = font_size(present)
    plot_px = (height - 150) * PLOT_SHARE  # the key rows' height (title, axis titles and margins taken off)
    ticks = key_ticks(hv.weights, plot_px / n, size - 2)
    axis = {"showgrid": False, "zeroline": False, "tickfont": {"size": size - 2}, "ticklabeloverflow": "allow"}
    every = {"tickmode": "array", "tickvals": list(range(0, d, 8)), "ticktext": [str(c) for c in range(0, d, 8)]}
    fig.update_xaxes(axis | {"showticklabels": False})
    fig.update_yaxes(axis | {"showticklabels": False, "autorange": "reversed"})
    fig.update_yaxes(showticklabels=True, tickmode="array", tickvals=[0], ticktext=["q"], row=1, col=1)
    fig.update_yaxes(showticklabels=True, tickmode="array", tickvals=ticks, ticktext=[esc(labels[i]) for i in ticks],
                     row=2, col=1)
    for c in (2, 3, 4):
        fig.update_yaxes(matches="y2", row=2, col=c)
    fig.update_xaxes(matches="x2", row=1, col=1)
    fig.update_xaxes(matches="x5", row=3, col=4)
    fig.update_xaxes(every | {"showticklabels": True, "title": {"text": "dimension of k", "standoff": 2}}, row=2,
                     col=1)
    fig.update_xaxes(every | {"showticklabels": True, "title": {"text": "dimension", "standoff": 2}}, row=3, col=4)
    fig.update_xaxes(showticklabels=True, tickmode="array", tickvals=[0], ticktext=["score"], side="top", row=2,
                     col=2)
    fig.update_xaxes(showticklabels=True, tickmode="array", tickvals=[0], ticktext=["α"], side="top", row=2, col=3)
    fig.update_xaxes(showticklabels=True, tickmode="array", tickvals=[(d - 1) / 2], ticktext=["values v"],
                     side="top", row=2, col=4)
    fig.update_yaxes(showticklabels=True, tickmode="array", tickvals=[0, 1], ticktext=["Σ α·v", "model z"],
                     side="left", row=3, col=4)
    apply_layout(fig, wrap(title, 500, present), present, height, top=70 if title else 40)
    fig.update_layout(margin={"l": 100, "r": 16, "b": 50}, plot_bgcolor="rgba(0,0,0,0)",
                      meta={"keys": [int(j) for j in hv.keys], "query": int(hv.query), "head": int(hv.head),
                            "site": hv.site})
    return fig


def outline_row(fig: go.Figure, row: int, colour: str, name: str = "tour-look") -> go.Figure:
    """Thin outlines around key row `row` in the K, α and V panels and around the two output rows, a row clear of
    the cells (a thick line would cover a 5-px row)."""
    d = len(fig.data[0].z[0])
    line = {"color": colour, "width": 2}
    for x, (a, b) in {"x2": (0, d - 1), "x4": (0, 0), "x5": (0, d - 1)}.items():  # K, α, V
        fig.add_shape(type="rect", xref=x, yref="y" + x[1:], x0=a - 0.5, x1=b + 0.5, y0=row - 1.5, y1=row + 1.5,
                      line=line, fillcolor="rgba(0,0,0,0)", name=name)
    fig.add_shape(type="rect", xref="x6", yref="y6", x0=-0.5, x1=d - 0.5, y0=-0.5, y1=1.5, name=name,
                  line=line | {"dash": "dot"}, fillcolor="rgba(0,0,0,0)")
    return fig
