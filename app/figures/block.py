"""The Block page's figures: the residual stream's norm and what each sub-layer adds, layer by layer; the
chosen token's vector at every stage of the walk; one line per variant over the layers; and how far each
token's output moves when a later token changes, one bar group per norm."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import DIVERGING, HEAD_COLORS, apply_layout, esc, tick_labels

ATTN_COLOR, MLP_COLOR, STREAM_COLOR = "#1f77b4", "#2ca02c", "#ff7f0e"


def layer_ticks(n_layers: int) -> tuple[list[int], list[str]]:
    """x = 0: h₀ (the embeddings); x = l + 1: block l (the stream after it)."""
    return list(range(n_layers + 1)), ["h₀ embed"] + [f"block {i}" for i in range(n_layers)]


def stream_norms(resid, attn, mlp, *, title: str = "", present: bool = False) -> go.Figure:
    """‖h_l‖ as a line over the layers, and the norms of the attention and MLP updates of each block as bars."""
    r = np.asarray(resid, dtype=np.float64)  # [L + 1]
    L = len(r) - 1
    x, ticks = layer_ticks(L)
    fig = go.Figure([
        go.Bar(x=x[1:], y=np.asarray(attn, dtype=np.float64), name="‖attention update‖", marker_color=ATTN_COLOR,
               hovertemplate="%{x}: ‖Δ attention‖ %{y:.4f}<extra></extra>"),
        go.Bar(x=x[1:], y=np.asarray(mlp, dtype=np.float64), name="‖MLP update‖", marker_color=MLP_COLOR,
               hovertemplate="%{x}: ‖Δ MLP‖ %{y:.4f}<extra></extra>"),
        go.Scatter(x=x, y=r, name="‖residual stream h_l‖", mode="lines+markers",
                   line={"color": STREAM_COLOR, "width": 3}, hovertemplate="%{x}: ‖h‖ %{y:.4f}<extra></extra>"),
    ])
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=ticks, title="layer")
    fig.update_yaxes(title="L2 norm at the chosen token")
    return apply_layout(fig, title, present, 400, barmode="group", legend={"orientation": "h", "y": -0.25},
                        meta={"layers": L})


def stage_vectors(vectors, stages, *, title: str = "", present: bool = False) -> go.Figure:
    """The chosen token's vector at every stage (rows) over its first dimensions (columns), diverging colours;
    each row scaled to its own max |value| so that a norm's ~1 and a stream's ~0.01 both read (hover: the value)."""
    v = np.asarray(vectors, dtype=np.float64)  # [stages, dims]
    peak = np.abs(v).max(axis=1, keepdims=True)  # [stages, 1]
    z = v / np.where(peak > 0, peak, 1.0)  # [stages, dims], each row in [−1, 1]
    y, x = np.arange(v.shape[0]), np.arange(v.shape[1])
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, customdata=v, colorscale=DIVERGING, zmin=-1, zmax=1,
                               colorbar={"title": {"text": "value / row max"}, "thickness": 14},
                               hovertemplate="%{y} · dim %{x}<br>value %{customdata:.4f}<extra></extra>"))
    fig.update_xaxes(title="dimension", tickmode="array", tickvals=x[:: max(1, len(x) // 16)], showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(s, 40) for s in stages], autorange="reversed",
                     showgrid=False)
    return apply_layout(fig, title, present, int(120 + 26 * len(y)), meta={"shape": list(v.shape)})


def per_layer(series: dict, *, title: str = "", ylabel: str = "", present: bool = False, with_embed: bool = False,
              log_y: bool = False) -> go.Figure:
    """One line per variant over the layers (x = block index, or 0 = h₀ and l + 1 = block l when `with_embed`)."""
    fig = go.Figure()
    n = 0
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=np.float64)
        n = len(y) - 1 if with_embed else len(y)
        x = np.arange(len(y)) if with_embed else np.arange(1, len(y) + 1)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=esc(name, 30),
                                 line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 3},
                                 hovertemplate=f"{esc(name, 30)}<br>%{{x}}: %{{y:.4g}}<extra></extra>"))
    x, ticks = layer_ticks(n)
    if not with_embed:
        x, ticks = x[1:], ticks[1:]
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=ticks, title="layer")
    fig.update_yaxes(title=ylabel, type="log" if log_y else "linear")
    return apply_layout(fig, title, present, 360, legend={"orientation": "h", "y": -0.3})


def leak_bars(delta: dict, tokens, changed: int, *, title: str = "", present: bool = False) -> go.Figure:
    """max |Δ output| per token, one bar group per norm; the changed token is marked by a dotted line."""
    x = np.arange(len(tokens))
    fig = go.Figure([go.Bar(x=x, y=np.asarray(d, dtype=np.float64), name=name,
                            marker_color=HEAD_COLORS[i % len(HEAD_COLORS)], text=tick_labels(tokens, 12),
                            textposition="none",
                            hovertemplate=f"{name}<br>%{{x}} %{{text}}: max |Δ| %{{y:.3g}}<extra></extra>")
                     for i, (name, d) in enumerate(delta.items())])
    fig.add_vline(x=changed - 0.5, line={"dash": "dot", "color": "#d62728", "width": 2})
    step = max(1, len(x) // (24 if present else 40))
    ticks = [f"{i} {t}" for i, t in zip(x, tick_labels(tokens, 10))]
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=ticks[::step], tickangle=-45,
                     title="token (its output: the logits)")
    fig.update_yaxes(title="max |Δ logits|")
    return apply_layout(fig, title, present, 380, barmode="group", legend={"orientation": "h", "y": -0.35})
