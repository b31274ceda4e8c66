"""Bars and boxes: a bar per token, max |Δlogits| per generation step against a tolerance (log axis), and
the distribution of the visible scores as one box per head (drawn from 7 statistics per head)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import FLOOR, apply_layout, log_floor, tick_labels


def token_bars(values, tokens, *, title: str = "", present: bool = False, name: str = "value") -> go.Figure:
    """A bar per token (integer x axis, escaped tick labels)."""
    v = np.asarray(values, dtype=np.float64)  # [T]
    x = np.arange(len(v))
    fig = go.Figure(go.Bar(x=x, y=v, marker_color="#1f77b4", text=tick_labels(tokens, 12),
                           hovertemplate=f"%{{x}} %{{text}}<br>{name} %{{y:.4f}}<extra></extra>",
                           textposition="none"))
    step = max(1, len(v) // (40 if present else 70))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=tick_labels(tokens, 12)[::step], tickangle=-60)
    fig.update_yaxes(title=name)
    return apply_layout(fig, title, present, 360)


def step_deltas(deltas, labels, tolerance: float, *, title: str = "", present: bool = False,
                passed=None) -> go.Figure:
    """Max |Δlogits| per generation step (log y) against the tolerance line; bars coloured pass/fail."""
    d = np.asarray(deltas, dtype=np.float64)
    x = np.arange(len(d))
    ok = np.asarray(passed if passed is not None else d <= tolerance, bool)
    fig = go.Figure(go.Bar(
        x=x, y=log_floor(d), customdata=d, text=tick_labels(labels, 12), textposition="none",
        marker_color=np.where(ok, "#2ca02c", "#d62728").tolist(),
        hovertemplate="step %{x}: %{text}<br>max |Δlogits| %{customdata:.3g}<extra></extra>"))
    fig.add_hline(y=tolerance, line={"dash": "dash", "color": "#ff7f0e", "width": 2},
                  annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
    step = max(1, len(x) // 40)
    fig.update_xaxes(title="generation step (the token it chose)", tickmode="array", tickvals=x[::step],
                     ticktext=[f"{i} {t}" for i, t in zip(x, tick_labels(labels, 10))][::step], tickangle=-60)
    top = max(float(d.max()) if d.size else 0.0, tolerance) * 30
    fig.update_yaxes(title="max |Δlogits| (log)", type="log", range=[np.log10(FLOOR) - 0.3, np.log10(top)])
    return apply_layout(fig, title, present, 380, meta={"n": int(len(d))})


def box_stats(stack, mask) -> dict[str, np.ndarray]:
    """Per head [H]: quartiles, mean and Tukey fences (the most extreme scores within 1.5·IQR) of the
    visible scores — what a box plot draws, so the page sends 7 numbers per head, not every score."""
    a = np.asarray(stack, dtype=np.float64)  # [H, q, k]
    m = np.broadcast_to(np.asarray(mask, bool), a.shape)  # [q, k] → [H, q, k]
    out = {k: np.full(a.shape[0], np.nan) for k in ("q1", "median", "q3", "mean", "lowerfence", "upperfence")}
    for h in range(a.shape[0]):
        v = a[h][m[h]]  # [visible cells]: head h's scores, flattened
        if not v.size:
            continue
        q1, med, q3 = np.percentile(v, [25, 50, 75])
        iqr = q3 - q1
        inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
        for k, val in zip(out, (q1, med, q3, v.mean(), inside.min(), inside.max())):
            out[k][h] = val
    return out


def score_boxes(stack, mask, *, title: str = "", present: bool = False, name: str = "score") -> go.Figure:
    """Distribution of visible scores per head: stack [H, q, k], one box per head in one trace,
    drawn from precomputed statistics (a bounded payload at any T)."""
    stats = box_stats(stack, mask)
    heads = np.arange(len(stats["median"]))
    fig = go.Figure(go.Box(x=heads, **stats, boxpoints=False, marker_color="#1f77b4", name=name,
                           hoverinfo="x+y"))
    fig.update_xaxes(title="head", tickmode="array", tickvals=list(heads))
    fig.update_yaxes(title=name, zeroline=True)
    return apply_layout(fig, title, present, 380)
