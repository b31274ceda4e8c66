"""The query–key view: one head's queries and keys (analysis.attention.qk_projection.QKPoints) as a 2-D scatter, two colours,
hover naming the token (or patch) and the input it came from. Every occurrence of a token is its own point. And
QK attribution's largest pairs (analysis.probes.qk_attribution) as a small query-side × key-side matrix."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.style import apply_layout, esc

QK_COLORS = {"query": "#1f77b4", "key": "#ff7f0e"}
PLURAL = {"query": "queries", "key": "keys"}


def qk_scatter(points, *, title: str = "", present: bool = False) -> go.Figure:
    """Queries and keys of one head in the PCA plane: one trace per kind; axes name the explained variance."""
    fig = go.Figure()
    for kind, color in QK_COLORS.items():
        sel = points.of(kind)
        idx = [i for i in range(len(sel)) if sel[i]]
        text = [f"{kind} · {esc(points.labels[i], 20)} (position {int(points.position[i])})<br>"
                f"{esc(points.names[points.source[i]], 40)}" for i in idx]
        fig.add_trace(go.Scatter(
            x=points.xy[sel, 0], y=points.xy[sel, 1], mode="markers", name=f"{PLURAL[kind]} ({len(idx)})", text=text,
            marker={"color": color, "size": 9 if present else 7, "opacity": 0.75,
                    "symbol": "circle" if kind == "query" else "diamond"},
            hovertemplate="%{text}<extra></extra>"))
    ex = points.explained
    fig.update_xaxes(title=f"PC 1 ({100 * ex[0]:.0f}% of variance)", zeroline=False)
    fig.update_yaxes(title=f"PC 2 ({100 * ex[1]:.0f}% of variance)", zeroline=False, scaleanchor="x")
    return apply_layout(fig, title, present, 520, legend={"orientation": "h", "y": -0.15},
                        meta={"explained": [float(e) for e in ex], "inputs": len(points.names)})


def qk_terms(q_parts: list[str], k_parts: list[str], values, *, title: str = "", present: bool = False) -> go.Figure:
    """A QK attribution's largest pairs as a matrix: query-side parts (rows) × key-side parts (columns), each cell
    one term scale·q_a·k_b of the score, on a diverging scale centred at 0; hover names both parts."""
    values = np.asarray(values, dtype=np.float64)
    fig = grid_heatmap(values, q_parts, k_parts, title=title, present=present, value_name="term", fmt="+.2f")
    names = np.array([[[esc(a, 40), esc(b, 40)] for b in k_parts] for a in q_parts], dtype=object)  # [q, k, 2]
    fig.update_traces(customdata=names, hovertemplate="query side %{customdata[0]}<br>key side %{customdata[1]}"
                                                      "<br>term %{z:+.4f}<extra></extra>")
    fig.update_xaxes(title="key side")
    fig.update_yaxes(title="query side")
    return fig


def why_title(a) -> str:
    """The title of a QK attribution's matrix: site, head, query → key (escaped tokens), score and weight."""
    t = a.tokens
    return (f"blocks.{a.layer}.attn, head {a.head}: {esc(t[a.query])} ({a.query}) → {esc(t[a.key])} ({a.key}), "
            f"score {a.score:.3f}, weight {a.weight:.3f}")
