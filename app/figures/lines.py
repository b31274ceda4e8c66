"""Line charts: series against a shared x (entropy against temperature, waves of a position table), small
differences on a log axis against a tolerance, the work a KV cache saves, and time and memory against the
sequence length (one line per backend)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import FLOOR, HEAD_COLORS, apply_layout, legend_under, log_floor, log_ticks
from plotly.subplots import make_subplots

BACKEND_COLORS = {"eager": "#d62728", "sdpa": "#1f77b4", "flash": "#2ca02c"}


def lines(x, series: dict, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
          log_x: bool = False, vline: float | None = None) -> go.Figure:
    """Series against a shared x, one colour each (optionally a log x and a dotted vertical line at `vline`)."""
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        fig.add_trace(go.Scatter(x=np.asarray(x), y=np.asarray(y, dtype=np.float64), mode="lines+markers",
                                 name=name, line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 3}))
    fig.update_xaxes(title=xlabel, type="log" if log_x else "linear")
    fig.update_yaxes(title=ylabel)
    if vline is not None:
        fig.add_vline(x=vline, line={"dash": "dot", "color": "#888"})
    return apply_layout(fig, title, present, 380, legend={"orientation": "h", "y": -0.25})


def curves(x, series: dict, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
           log_y: bool = False, markers: bool = False) -> go.Figure:
    """Series against a shared x (optionally a log y, exact zeros at FLOOR), one colour each."""
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=np.float64)
        fig.add_trace(go.Scatter(x=np.asarray(x), y=log_floor(y) if log_y else y, mode="lines+markers" if markers
                                 else "lines", name=name, line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 2.5}))
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel, type="log" if log_y else "linear")
    return apply_layout(fig, title, present, 340, legend={"orientation": "h", "y": -0.3})


def tiny_lines(x, series: dict, tolerance: float | None = None, *, title: str = "", xlabel: str = "",
               ylabel: str = "", present: bool = False) -> go.Figure:
    """Lines of small differences on a log axis (exact zeros drawn at FLOOR), with a tolerance line."""
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=np.float64)
        fig.add_trace(go.Scatter(x=np.asarray(x), y=log_floor(y), customdata=y, mode="lines+markers", name=name,
                                 line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 3},
                                 hovertemplate=f"{name}<br>{xlabel} %{{x}}<br>max |Δ| %{{customdata:.3g}}<extra></extra>"))
    if tolerance is not None:
        fig.add_hline(y=tolerance, line={"dash": "dash", "color": "#ff7f0e", "width": 2},
                      annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel, type="log", range=[np.log10(FLOOR) - 0.3, -2])
    return legend_under(apply_layout(fig, title, present, 360), len(series))


def cache_cost(steps, cached, uncached, *, title: str = "", present: bool = False) -> go.Figure:
    """Cumulative attention-score cells computed with and without the cache."""
    fig = go.Figure()
    for name, y, c in (("without cache: every step recomputes the whole t×t matrix", uncached, "#d62728"),
                       ("with cache: one new row of t scores per step", cached, "#2ca02c")):
        fig.add_trace(go.Scatter(x=np.asarray(steps), y=np.asarray(y, dtype=np.float64), mode="lines+markers",
                                 name=name, line={"color": c, "width": 3}))
    fig.update_xaxes(title="generation step")
    fig.update_yaxes(title="score cells computed so far (all layers, heads)")
    return legend_under(apply_layout(fig, title, present, 360), 2)


def scaling(rows, *, title: str = "", present: bool = False, time_key: str = "ms",
            mem_key: str = "peak_bytes", series_key: str = "backend", time_unit: str = "ms",
            mem_scale: float = 1 / 2**20, theory: bool = True) -> go.Figure:
    """Time and peak memory against sequence length, one line per backend (log–log), side by side."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"time ({time_unit})", "peak memory (MiB)"),
                        horizontal_spacing=0.12)
    names = list(dict.fromkeys(r[series_key] for r in rows))
    for i, name in enumerate(names):
        rs = sorted((r for r in rows if r[series_key] == name), key=lambda r: r["T"])
        color = BACKEND_COLORS.get(name, HEAD_COLORS[i % len(HEAD_COLORS)])
        T = [r["T"] for r in rs]
        fig.add_trace(go.Scatter(x=T, y=[r[time_key] for r in rs], name=name, legendgroup=name, mode="lines+markers",
                                 line={"color": color, "width": 3}), 1, 1)
        mem = [None if r.get(mem_key) is None else r[mem_key] * mem_scale for r in rs]
        if any(m is not None for m in mem):
            fig.add_trace(go.Scatter(x=T, y=mem, name=name, legendgroup=name, showlegend=False,
                                     mode="lines+markers", line={"color": color, "width": 3}), 1, 2)
    if theory and rows and "matrix_bytes" in rows[0]:
        rs = sorted({r["T"]: r for r in rows}.values(), key=lambda r: r["T"])
        fig.add_trace(go.Scatter(x=[r["T"] for r in rs], y=[r["matrix_bytes"] * mem_scale for r in rs],
                                 name="one H×T×T float32 matrix", mode="lines",
                                 line={"color": "#888", "dash": "dot", "width": 2}), 1, 2)
    fig.update_xaxes(type="log", title="sequence length T", **log_ticks([r["T"] for r in rows]))
    for col in (1, 2):  # each panel's own ticks, every one labelled with its number
        fig.update_yaxes(type="log", row=1, col=col, **log_ticks([y for t in fig.data if t.xaxis == ("x" if col == 1
                                                                 else f"x{col}") for y in t.y]))
    return apply_layout(fig, title, present, 400, legend={"orientation": "h", "y": -0.3})
