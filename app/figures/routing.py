"""Mixture-of-experts routing figures: a tokens × experts heatmap of router weights, expert load per layer
against the uniform share, router entropy per token, and the share of each token class per expert."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import HEAD_COLORS, THEME_SCALE, apply_layout, tick_labels


def expert_labels(n: int) -> list[str]:
    return [f"E{e}" for e in range(n)]


def gate_heatmap(gates, tokens, *, chosen=None, title: str = "", present: bool = False) -> go.Figure:
    """Router weight of each token (row) for each expert (column); experts not chosen are 0. `chosen` [T, k]
    marks the picks in the hover (first choice first)."""
    z = np.asarray(gates, dtype=np.float32)  # [T, E]
    T, E = z.shape
    y, x = np.arange(T), np.arange(E)
    labels = tick_labels(tokens)
    hover = [[f"{i} {labels[i]} → E{e}" for e in x] for i in y]
    if chosen is not None:
        rank = {(i, int(e)): r for i, row in enumerate(np.asarray(chosen)) for r, e in enumerate(row)}
        hover = [[h + (f" (choice {rank[(i, e)] + 1})" if (i, e) in rank else " (not chosen)")
                  for e, h in enumerate(row)] for i, row in enumerate(hover)]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, zmin=0.0, zmax=1.0, colorscale=THEME_SCALE, text=hover,
                               hovertemplate="%{text}<br>weight %{z:.3f}<extra></extra>",
                               colorbar={"title": "weight"}, xgap=1, ygap=1))
    fig.update_xaxes(title="expert", tickmode="array", tickvals=x, ticktext=expert_labels(E))
    step = max(1, T // 40)
    fig.update_yaxes(title="token", tickmode="array", tickvals=y[::step],
                     ticktext=[f"{i} {t}" for i, t in zip(y, labels)][::step], autorange="reversed")
    return apply_layout(fig, title, present, max(320, 22 * T + 120))


LABELS = 24  # token labels on the entropy chart's axis, at most (every token has its hover)


def level(x, y: float, name: str) -> go.Scatter:
    """A dashed horizontal line at `y` across the x positions, named in the legend (a label on the plot would
    sit on the bars or lines)."""
    return go.Scatter(x=[x[0] - 0.5, x[-1] + 0.5], y=[y, y], mode="lines", name=name,
                      line={"dash": "dash", "color": "#ff7f0e", "width": 2},
                      hovertemplate=f"{name}<extra></extra>")


def load_bars(load, uniform: float, *, title: str = "", present: bool = False) -> go.Figure:
    """Share of the token slots each expert received, per layer (one bar group per layer), and the uniform
    share as a dashed line."""
    a = np.asarray(load, dtype=np.float32)  # [L, E]
    L, E = a.shape
    x = np.arange(L)
    fig = go.Figure([go.Bar(x=x, y=a[:, e], name=f"E{e}", marker_color=HEAD_COLORS[e % len(HEAD_COLORS)],
                            hovertemplate=f"layer %{{x}} · E{e}<br>load %{{y:.3f}}<extra></extra>")
                     for e in range(E)])
    fig.add_trace(level(x, uniform, f"uniform {uniform:.3g}"))
    fig.update_xaxes(title="layer", tickmode="array", tickvals=x, ticktext=[str(i) for i in x])
    fig.update_yaxes(title="share of token slots", rangemode="tozero")
    return apply_layout(fig, title, present, 340, barmode="group")


def entropy_lines(entropy, tokens, max_bits: float, *, title: str = "", present: bool = False) -> go.Figure:
    """Router entropy (bits) per token, one line per layer; the dashed line is log2(n_experts) (uniform)."""
    a = np.asarray(entropy, dtype=np.float32)  # [L, T]
    L, T = a.shape
    x = np.arange(T)
    labels = tick_labels(tokens)
    fig = go.Figure([go.Scatter(x=x, y=a[layer], mode="lines+markers", name=f"layer {layer}", text=labels,
                                line={"color": HEAD_COLORS[layer % len(HEAD_COLORS)]},
                                hovertemplate=f"layer {layer} · %{{x}} %{{text}}<br>%{{y:.3f}} bits<extra></extra>")
                     for layer in range(L)])
    fig.add_trace(level(x, max_bits, f"uniform: {max_bits:.3g} bits"))
    step = -(-T // LABELS)  # ceil: at most LABELS upright labels, apart at 1024 px
    fig.update_xaxes(title="token", tickmode="array", tickvals=x[::step],
                     ticktext=[f"{i} {t}" for i, t in zip(x, labels)][::step], tickangle=-90)  # upright: no overlap
    fig.update_yaxes(title="router entropy (bits)", range=[0, max_bits * 1.15])
    return apply_layout(fig, title, present, 380)


def class_share(share, classes: list[str], uniform: float, *, title: str = "", present: bool = False) -> go.Figure:
    """Per expert (rows) and token class (columns) the share of the class routed there first, as a ratio to
    the uniform share (1 = no preference); the cell text is the share."""
    s = np.asarray(share, dtype=np.float32)  # [E, C]
    E, C = s.shape
    x, y = np.arange(C), np.arange(E)
    text = [[f"{v:.0%}" for v in row] for row in s]
    fig = go.Figure(go.Heatmap(z=s / uniform, x=x, y=y, text=text, texttemplate="%{text}", colorscale="RdBu_r",
                               zmid=1.0, colorbar={"title": "× uniform"},
                               hovertemplate="E%{y} · class %{x}<br>%{text} of the class (%{z:.2f}× uniform)"
                                             "<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=tick_labels(classes, 16), side="top")
    fig.update_yaxes(title="expert", tickmode="array", tickvals=y, ticktext=expert_labels(E), autorange="reversed")
    return apply_layout(fig, title, present, 120 + 44 * E)
