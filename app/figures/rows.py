"""Rows over the tokens, stacked into one heatmap: one per attribution method (each scaled to its own max),
one per head of a query's attention, or one per generation step (replayed with ▶)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.matrix import HOVER_TEXT_CELLS
from attnlab.app.figures.style import MASKED_BG, THEME_SCALE, apply_layout, esc, layout, tick_labels

COVER = "rgb(128,128,128)"  # ▶ replay: an opaque grey over the rows not yet generated


def method_rows(rows: dict, tokens, *, title: str = "", present: bool = False,
                source: int | None = None, exclude: int | None = None) -> go.Figure:
    """Several [T] relevance rows (one per method), each scaled to its own max, as one heatmap.
    `exclude`: a position left out of the max (the query token, which often dominates its own row)."""
    names = list(rows)
    z = np.stack([np.asarray(rows[n], dtype=np.float64) for n in names])  # [M, T]
    others = np.delete(z, exclude, axis=1) if exclude is not None and z.shape[1] > 1 else z  # [M, T − 1]
    top = np.nanmax(np.abs(others), axis=1, keepdims=True)
    zn = np.clip(np.divide(z, top, out=np.zeros_like(z), where=top > 0), 0, 1)
    x = np.arange(z.shape[1])
    labels = tick_labels(tokens, 12)
    trace = go.Heatmap(z=zn, x=x, y=names, customdata=z, colorscale=THEME_SCALE, zmin=0, zmax=1,
                       text=[labels] * len(names), colorbar={"title": {"text": "share of max"}, "thickness": 14},
                       hovertemplate="%{y}<br>%{x} %{text}<br>value %{customdata:.4f}<extra></extra>")
    step = max(1, len(x) // (40 if present else 70))
    shapes = [] if source is None else [  # the true source's column
        {"type": "rect", "yref": "y domain", "y0": 0, "y1": 1, "xref": "x", "x0": source - 0.5, "x1": source + 0.5,
         "line": {"color": "#d62728", "width": 2, "dash": "dot"}, "fillcolor": "rgba(0,0,0,0)"}]
    return go.Figure([trace], layout(title, present, 140 + 46 * len(names) + (20 if present else 0), shapes=shapes,
                                     xaxis={"tickmode": "array", "tickvals": x[::step], "ticktext": labels[::step],
                                            "tickangle": -60, "showgrid": False},
                                     yaxis={"autorange": "reversed", "showgrid": False}))


def head_rows(rows, k_tokens, *, title: str = "", present: bool = False) -> go.Figure:
    """One query's attention row for every head: [H, K] (rows = heads, the last row the head mean)."""
    a = np.asarray(rows, dtype=np.float32)
    H, K = a.shape
    z = np.vstack([a, a.mean(0, keepdims=True)])  # [H + 1, K]: the heads, then their mean
    ylab = [f"head {h}" for h in range(H)] + ["mean"]
    x, y = np.arange(K), np.arange(H + 1)
    xlab = tick_labels(k_tokens, 12)
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale=THEME_SCALE, zmin=0, zmax=1, ygap=1,
                               text=[xlab] * (H + 1), colorbar={"title": {"text": "weight"}, "thickness": 14},
                               hovertemplate="%{y}<br>key %{x} %{text}<br>weight %{z:.4f}<extra></extra>"))
    step = max(1, int(np.ceil(K / (40 if present else 64))))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=xlab[::step], tickangle=-60, showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=ylab, autorange="reversed", showgrid=False)
    return apply_layout(fig, title, present, int(140 + 34 * (H + 1)), meta={"shape": [H + 1, K]})


def generation_matrix(rows, tokens, prompt_len: int, *, k_tokens=None, title: str = "", present: bool = False,
                      current: int | None = None) -> go.Figure:
    """Each generated token's attention row (rows = steps, columns = context positions). Rows appear one
    by one under ▶ (Plotly frames), as the tokens were produced; `current` outlines one step's row.

    rows [steps, K]; for self-attention K = every position (future keys of a step are NaN/grey);
    for cross-attention pass k_tokens (the source) and no cells are masked."""
    a = np.array(rows, dtype=np.float32)
    n, K = a.shape
    cross = k_tokens is not None
    keys = list(k_tokens) if cross else list(tokens)[:K]
    if not cross:  # step s attends keys 0..prompt_len+s−1
        a = np.where(np.arange(K)[None, :] < (prompt_len + np.arange(n))[:, None], a, np.nan)  # [1, K] vs [n, 1] → [n, K]
    x, y = np.arange(K), np.arange(n)
    new = list(tokens)[prompt_len:prompt_len + n]
    ylab = [f"{i} → {esc(t, 12)}" for i, t in enumerate(new)]
    xlab = tick_labels(keys, 12)
    finite = a[np.isfinite(a)]
    zmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    hover = {"hovertemplate": "step %{y} ← key %{x}<br>weight %{z:.4f}<extra></extra>"}
    if a.size <= HOVER_TEXT_CELLS:  # per-cell labels only while they stay small
        hover = {"text": [[f"{ylab[i]} ← {xlab[j]}" for j in range(K)] for i in range(n)],
                 "hovertemplate": "step %{text}<br>weight %{z:.4f}<extra></extra>"}
    fig = go.Figure(go.Heatmap(z=a, x=x, y=y, colorscale=THEME_SCALE, zmin=0, zmax=zmax, hoverongaps=False,
                               colorbar={"title": {"text": "weight"}, "thickness": 14}, **hover))
    if not cross and prompt_len > 0:
        fig.add_vline(x=prompt_len - 0.5, line={"color": "#888", "dash": "dot"})
    if current is not None and 0 <= current < n:
        fig.add_hrect(y0=current - 0.5, y1=current + 0.5, line={"color": "#ff7f0e", "width": 2},
                      fillcolor="rgba(0,0,0,0)")
    if n > 1:  # ▶: each frame only covers the rows not yet written (layout shapes, no copy of the matrix)
        shapes = [sh.to_plotly_json() for sh in fig.layout.shapes]

        def cover(upto: int) -> list[dict]:
            hidden = [] if upto >= n - 1 else [{"type": "rect", "xref": "x", "yref": "y", "layer": "above",
                                                 "x0": -0.5, "x1": K - 0.5, "y0": upto + 0.5, "y1": n - 0.5,
                                                 "fillcolor": COVER, "line": {"width": 0}}]
            return shapes + hidden

        fig.frames = [go.Frame(layout={"shapes": cover(s)}, name=str(s)) for s in range(n)]
        fig.update_layout(updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0, "y": 1, "xanchor": "left", "yanchor": "bottom",
            "showactive": False, "pad": {"b": 6},  # above the plot, under the title: off the axes and their titles
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
    side = 24 if present else 20
    buttons = (44 if present else 40) if n > 1 else 0  # px of the top margin the ▶ buttons take
    return apply_layout(fig, title, present, int(min(900, max(320, n * side + 200))) + buttons,
                        top=(60 if title else 20) + buttons, plot_bgcolor=MASKED_BG,
                        meta={"steps": int(n), "keys": int(K), "prompt_len": int(prompt_len)})
