"""Plotly builders for the mechanics pages (KV cache, backends, step by step, positions, generation).

Same conventions as app/figures.py: token labels escaped, integer axes with tick text, masked cells
NaN on the grey background, one trace where one will do. Attention matrices themselves are drawn with
figures.matrix_heatmap / figures.mosaic; this module adds the charts only these pages need.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures import DIVERGING, HEAD_COLORS, MASKED_BG, THEME_SCALE, _font, _layout, esc, tick_labels

BACKEND_COLORS = {"eager": "#d62728", "sdpa": "#1f77b4", "flash": "#2ca02c"}
FLOOR = 1e-12  # |Δ| values of exactly 0 sit here on log axes


def _floor(v) -> np.ndarray:
    return np.maximum(np.asarray(v, dtype=np.float64), FLOOR)


# -- KV cache ----------------------------------------------------------------------------------------------
def step_deltas(deltas, labels, tolerance: float, *, title: str = "", present: bool = False,
                passed=None) -> go.Figure:
    """Max |Δlogits| per generation step (log y) against the tolerance line; bars coloured pass/fail."""
    d = np.asarray(deltas, dtype=np.float64)
    x = np.arange(len(d))
    ok = np.asarray(passed if passed is not None else d <= tolerance, bool)
    fig = go.Figure(go.Bar(
        x=x, y=_floor(d), customdata=d, text=tick_labels(labels, 12), textposition="none",
        marker_color=np.where(ok, "#2ca02c", "#d62728").tolist(),
        hovertemplate="step %{x}: %{text}<br>max |Δlogits| %{customdata:.3g}<extra></extra>"))
    fig.add_hline(y=tolerance, line={"dash": "dash", "color": "#ff7f0e", "width": 2},
                  annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
    step = max(1, len(x) // 40)
    fig.update_xaxes(title="generation step (the token it chose)", tickmode="array", tickvals=x[::step],
                     ticktext=[f"{i} {t}" for i, t in zip(x, tick_labels(labels, 10))][::step], tickangle=-60)
    top = max(float(d.max()) if d.size else 0.0, tolerance) * 30
    fig.update_yaxes(title="max |Δlogits| (log)", type="log", range=[np.log10(FLOOR) - 0.3, np.log10(top)])
    return _layout(fig, title, present, 380, meta={"n": int(len(d))})


def chunk_lines(fig: go.Figure, bounds, n_keys: int) -> go.Figure:
    """Mark the cached steps on a stitched matrix: the prefill block, the 2-token chunk, and (below) one
    row per step. Lines for every single-token step would hatch the picture, so only the first two."""
    labels = ["prefill", "2-token chunk" if len(bounds) > 1 and bounds[1][1] - bounds[1][0] == 2 else "step"]
    for (a, b), name in zip(bounds[:2], labels):
        fig.add_hline(y=b - 0.5, line={"color": "#ff7f0e", "width": 2, "dash": "dot"})
        fig.add_annotation(x=n_keys - 0.5, y=(a + b - 1) / 2, text=name, showarrow=False, xanchor="right",
                           font={"color": "#ff7f0e", "size": 12})
    if len(bounds) > 2:
        a = bounds[2][0]
        fig.add_annotation(x=n_keys - 0.5, y=(a + bounds[-1][1] - 1) / 2, text="1 token per step", showarrow=False,
                           xanchor="right", font={"color": "#ff7f0e", "size": 12})
    return fig


def cache_cost(steps, cached, uncached, *, title: str = "", present: bool = False) -> go.Figure:
    """Cumulative attention-score cells computed with and without the cache."""
    fig = go.Figure()
    for name, y, c in (("without cache: every step recomputes the whole t×t matrix", uncached, "#d62728"),
                       ("with cache: one new row of t scores per step", cached, "#2ca02c")):
        fig.add_trace(go.Scatter(x=np.asarray(steps), y=np.asarray(y, dtype=np.float64), mode="lines+markers",
                                 name=name, line={"color": c, "width": 3}))
    fig.update_xaxes(title="generation step")
    fig.update_yaxes(title="score cells computed so far (all layers, heads)")
    return _layout(fig, title, present, 360, legend={"orientation": "h", "y": -0.3})


def tiny_lines(x, series: dict, tolerance: float | None = None, *, title: str = "", xlabel: str = "",
               ylabel: str = "", present: bool = False) -> go.Figure:
    """Lines of small differences on a log axis (exact zeros drawn at FLOOR), with a tolerance line."""
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=np.float64)
        fig.add_trace(go.Scatter(x=np.asarray(x), y=_floor(y), customdata=y, mode="lines+markers", name=name,
                                 line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 3},
                                 hovertemplate=f"{name}<br>{xlabel} %{{x}}<br>max |Δ| %{{customdata:.3g}}<extra></extra>"))
    if tolerance is not None:
        fig.add_hline(y=tolerance, line={"dash": "dash", "color": "#ff7f0e", "width": 2},
                      annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel, type="log", range=[np.log10(FLOOR) - 0.3, -2])
    return _layout(fig, title, present, 360, legend={"orientation": "h", "y": -0.3})


# -- backends ----------------------------------------------------------------------------------------------
def delta_grid(z, rows, cols, tolerance: float, *, title: str = "", present: bool = False) -> go.Figure:
    """A sites × comparisons grid of max |Δ| values, printed in scientific notation, coloured by log10."""
    z = np.asarray(z, dtype=np.float64)
    lz = np.log10(_floor(z))
    x, y = np.arange(z.shape[1]), np.arange(z.shape[0])
    fig = go.Figure(go.Heatmap(
        z=lz, x=x, y=y, customdata=z, text=[[f"{v:.1e}" for v in r] for r in z], texttemplate="%{text}",
        textfont={"size": _font(present)}, colorscale="Greens_r", zmin=np.log10(FLOOR), zmax=np.log10(tolerance),
        colorbar={"title": {"text": "log10 |Δ|"}, "thickness": 14},
        hovertemplate="%{y}<br>%{x}<br>max |Δ| %{customdata:.3g}<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 40) for c in cols], side="top", showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 40) for r in rows], autorange="reversed",
                     showgrid=False)
    return _layout(fig, title, present, int(max(240, 90 + 40 * z.shape[0])), meta={"shape": list(z.shape)})


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
    fig.update_xaxes(type="log", title="sequence length T", dtick="D2")
    fig.update_yaxes(type="log", dtick="D2")
    return _layout(fig, title, present, 400, legend={"orientation": "h", "y": -0.3})


# -- step by step ------------------------------------------------------------------------------------------
def number_grid(m, row_labels, col_labels, *, title: str = "", present: bool = False, kind: str = "scores",
                fmt: str = "{:.2f}", mark: tuple[int, int] | None = None,
                hidden: bool = False, height: int | None = None) -> go.Figure:
    """A small matrix with its numbers printed in the cells. −∞ cells (masked) are grey and read '−∞'.
    kind 'weights' (sequential 0..1), 'scores' (diverging) or 'values' (diverging). `hidden` draws the
    grid with '?' in every cell (quiz mode)."""
    a = np.asarray(m, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    finite = np.isfinite(a)
    z = np.where(finite, a, np.nan)
    text = [["?" if hidden else (fmt.format(v) if np.isfinite(v) else ("−∞" if v < 0 else "∞")) for v in r]
            for r in a]
    if kind == "weights":
        kw = {"colorscale": THEME_SCALE, "zmin": 0.0, "zmax": 1.0}
    else:
        lim = float(np.abs(z[finite]).max()) if finite.any() else 1.0
        kw = {"colorscale": DIVERGING, "zmin": -(lim or 1.0), "zmax": lim or 1.0}
    if hidden:
        z = np.zeros_like(z)
        kw = {"colorscale": [[0, "rgba(128,128,128,0.15)"], [1, "rgba(128,128,128,0.15)"]], "zmin": 0, "zmax": 1}
    ny, nx = a.shape
    x, y = np.arange(nx), np.arange(ny)
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, text=text, texttemplate="%{text}", showscale=False,
                               textfont={"size": _font(present) + 1}, hoverongaps=False, xgap=2, ygap=2,
                               hovertemplate="row %{y} · column %{x}<br>%{text}<extra></extra>", **kw))
    # masked cells are NaN (no text from the heatmap): print '−∞' over them
    fig.add_trace(go.Scatter(
        x=[j for i in range(ny) for j in range(nx) if not finite[i, j]],
        y=[i for i in range(ny) for j in range(nx) if not finite[i, j]], mode="text",
        text=["?" if hidden else "−∞"] * int((~finite).sum()), textfont={"size": _font(present) + 1},
        hoverinfo="skip", showlegend=False))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 12) for c in col_labels], side="top",
                     showgrid=False, zeroline=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 12) for r in row_labels], autorange="reversed",
                     showgrid=False, zeroline=False)
    if mark is not None:
        i, j = mark
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5,
                      line={"color": "#ff7f0e", "width": 4})
    cell = 44 if present else 36
    _layout(fig, title, present, height or int(90 + cell * ny), plot_bgcolor=MASKED_BG, meta={"shape": [ny, nx]})
    return fig.update_layout(margin={"l": 10, "r": 10, "t": 80 if title else 30, "b": 10})


# -- positions ---------------------------------------------------------------------------------------------
def table_heatmap(z, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
                  diverging: bool = True, value_name: str = "value", mask=None,
                  height: int | None = None, y_labels=None, x_labels=None) -> go.Figure:
    """A plain numeric matrix (positions × dimensions, positions × positions, …) on integer axes."""
    a = np.array(z, dtype=np.float32)
    if mask is not None:
        a = np.where(np.asarray(mask, bool), a, np.nan)
    finite = a[np.isfinite(a)]
    if diverging:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        kw = {"colorscale": DIVERGING, "zmin": -(lim or 1.0), "zmax": lim or 1.0}
    else:
        kw = {"colorscale": THEME_SCALE, "zmin": float(finite.min()) if finite.size else 0.0,
              "zmax": float(finite.max()) if finite.size else 1.0}
    ny, nx = a.shape
    x, y = np.arange(nx), np.arange(ny)
    fig = go.Figure(go.Heatmap(z=a, x=x, y=y, hoverongaps=False, colorbar={"title": {"text": value_name},
                                                                          "thickness": 14},
                               hovertemplate=f"{ylabel} %{{y}}<br>{xlabel} %{{x}}<br>{value_name} %{{z:.4f}}"
                                             "<extra></extra>", **kw))
    xa = {"tickmode": "array", "tickvals": x, "ticktext": [esc(t, 10) for t in x_labels]} if x_labels else {}
    ya = {"tickmode": "array", "tickvals": y, "ticktext": [esc(t, 10) for t in y_labels]} if y_labels else {}
    fig.update_xaxes(title=xlabel, showgrid=False, zeroline=False, **xa)
    fig.update_yaxes(title=ylabel, showgrid=False, zeroline=False, autorange="reversed", **ya)
    return _layout(fig, title, present, height or 420, plot_bgcolor=MASKED_BG, meta={"shape": [ny, nx]})


def curves(x, series: dict, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
           log_y: bool = False, height: int = 340, markers: bool = False) -> go.Figure:
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=np.float64)
        fig.add_trace(go.Scatter(x=np.asarray(x), y=_floor(y) if log_y else y, mode="lines+markers" if markers
                                 else "lines", name=name, line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 2.5}))
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel, type="log" if log_y else "linear")
    return _layout(fig, title, present, height, legend={"orientation": "h", "y": -0.3})


# -- generation --------------------------------------------------------------------------------------------
def generation_matrix(rows, tokens, prompt_len: int, *, k_tokens=None, title: str = "", present: bool = False, current: int | None = None, animate: bool = True) -> go.Figure:
    """Each generated token's attention row (rows = steps, columns = context positions). Rows appear one
    by one under ▶ (Plotly frames), as the tokens were produced; `current` outlines one step's row.

    rows [steps, K]; for self-attention K = every position (future keys of a step are NaN/grey);
    for cross-attention pass k_tokens (the source) and no cells are masked."""
    a = np.array(rows, dtype=np.float32)
    n, K = a.shape
    cross = k_tokens is not None
    keys = list(k_tokens) if cross else list(tokens)[:K]
    if not cross:  # step s attends keys 0..prompt_len+s−1
        a = np.where(np.arange(K)[None, :] < (prompt_len + np.arange(n))[:, None], a, np.nan)
    x, y = np.arange(K), np.arange(n)
    new = list(tokens)[prompt_len:prompt_len + n]
    ylab = [f"{i} → {esc(t, 12)}" for i, t in enumerate(new)]
    xlab = tick_labels(keys, 12)
    finite = a[np.isfinite(a)]
    zmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    text = [[f"{ylab[i]} ← {xlab[j]}" for j in range(K)] for i in range(n)]

    def trace(upto: int) -> go.Heatmap:
        z = np.where(y[:, None] <= upto, a, np.nan) if upto < n - 1 else a
        return go.Heatmap(z=z, x=x, y=y, colorscale=THEME_SCALE, zmin=0, zmax=zmax, hoverongaps=False,
                          text=text, colorbar={"title": {"text": "weight"}, "thickness": 14},
                          hovertemplate="step %{text}<br>weight %{z:.4f}<extra></extra>")

    fig = go.Figure(trace(n - 1))
    if animate and n > 1:
        fig.frames = [go.Frame(data=[trace(s)], name=str(s)) for s in range(n)]
        fig.update_layout(updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0, "y": -0.08, "xanchor": "left", "yanchor": "top",
            "showactive": False, "pad": {"t": 40},
            "buttons": [{"label": "▶ replay", "method": "animate",
                         "args": [None, {"frame": {"duration": 450, "redraw": True}, "fromcurrent": False,
                                         "transition": {"duration": 0}}]},
                        {"label": "pause", "method": "animate",
                         "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}]}]}])
    step = max(1, int(np.ceil(K / (40 if present else 64))))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=xlab[::step], tickangle=-60,
                     title="source token (key)" if cross else "context token (key)", showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=ylab, autorange="reversed",
                     title="generation step → new token", showgrid=False)
    if not cross and prompt_len > 0:
        fig.add_vline(x=prompt_len - 0.5, line={"color": "#888", "dash": "dot"})
    if current is not None and 0 <= current < n:
        fig.add_hrect(y0=current - 0.5, y1=current + 0.5, line={"color": "#ff7f0e", "width": 2},
                      fillcolor="rgba(0,0,0,0)")
    side = 24 if present else 20
    return _layout(fig, title, present, int(min(900, max(320, n * side + 200))), plot_bgcolor=MASKED_BG,
                   meta={"steps": int(n), "keys": int(K), "prompt_len": int(prompt_len)})


def head_rows(rows, k_tokens, *, title: str = "", present: bool = False,
              highlight: int | None = None) -> go.Figure:
    """One query's attention row for every head: [H, K] (rows = heads, the last row the head mean)."""
    a = np.asarray(rows, dtype=np.float32)
    H, K = a.shape
    z = np.vstack([a, a.mean(0, keepdims=True)])
    ylab = [f"head {h}" for h in range(H)] + ["mean"]
    x, y = np.arange(K), np.arange(H + 1)
    xlab = tick_labels(k_tokens, 12)
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale=THEME_SCALE, zmin=0, zmax=1, ygap=1,
                               text=[xlab] * (H + 1), colorbar={"title": {"text": "weight"}, "thickness": 14},
                               hovertemplate="%{y}<br>key %{x} %{text}<br>weight %{z:.4f}<extra></extra>"))
    step = max(1, int(np.ceil(K / (40 if present else 64))))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=xlab[::step], tickangle=-60, showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=ylab, autorange="reversed", showgrid=False)
    if highlight is not None and 0 <= highlight < K:
        fig.add_vrect(x0=highlight - 0.5, x1=highlight + 0.5, line={"color": "#d62728", "width": 2, "dash": "dot"},
                      fillcolor="rgba(0,0,0,0)")
    return _layout(fig, title, present, int(140 + 34 * (H + 1)), meta={"shape": [H + 1, K]})


def mark_cells(fig: go.Figure, cells, *, name: str = "reference alignment") -> go.Figure:
    """Circles on (row, column) cells of a heatmap, e.g. a translation's word alignment."""
    cells = list(cells)
    if cells:
        fig.add_trace(go.Scatter(x=[c for _, c in cells], y=[r for r, _ in cells], mode="markers", name=name,
                                 marker={"symbol": "circle-open", "size": 14, "color": "#ff7f0e",
                                         "line": {"width": 2.5}},
                                 hovertemplate="reference: target %{y} ↔ source %{x}<extra></extra>"))
        fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.25})
    return fig
