"""Small labelled grids with their numbers: a statistic per layer × head, the steps of softmax(QKᵀ/√d)·V
with a number in every cell, a plain numeric table (positions × dimensions …), and max |Δ| per site ×
comparison on a log colour scale."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import (
    DIVERGING,
    FLOOR,
    MASKED_BG,
    THEME_SCALE,
    apply_layout,
    esc,
    font_size,
    layout,
    log_floor,
)


def grid_heatmap(z, row_labels, col_labels, *, title: str = "", present: bool = False, diverging: bool = True,
                 value_name: str = "value", fmt: str = ".2f", kv_group: int = 1) -> go.Figure:
    """A small labelled grid (e.g. layers × heads of a statistic), values printed in the cells. kv_group > 1
    (columns are heads under grouped-query attention): a line between each run of kv_group heads that share one
    k/v head."""
    z = np.asarray(z, dtype=np.float64)
    finite = z[np.isfinite(z)]
    lim = float(np.abs(finite).max()) if finite.size else 1.0
    kw = {"colorscale": DIVERGING, "zmin": -lim or -1, "zmax": lim or 1} if diverging else \
        {"colorscale": THEME_SCALE, "zmin": float(finite.min()) if finite.size else 0,
         "zmax": float(finite.max()) if finite.size else 1}
    x, y = np.arange(z.shape[1]), np.arange(z.shape[0])
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, texttemplate=f"%{{z:{fmt}}}", hoverongaps=False,
                               textfont={"size": font_size(present) - 1},
                               colorbar={"title": {"text": value_name}, "thickness": 14},
                               hovertemplate=f"%{{y}} · %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>", **kw))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 30) for c in col_labels], side="top",
                     showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 40) for r in row_labels], autorange="reversed",
                     showgrid=False)
    if kv_group > 1:
        for c in range(kv_group, z.shape[1], kv_group):
            fig.add_vline(x=c - 0.5, line={"color": "white", "width": 4})
        fig.update_layout(meta={"kv_group": kv_group})
    return apply_layout(fig, title, present, int(max(260, 60 + 44 * z.shape[0] + 110)), top=100 if title else 50,
                        plot_bgcolor=MASKED_BG)


def number_grid(m, row_labels, col_labels, *, title: str = "", present: bool = False, kind: str = "scores",
                fmt: str = "{:.2f}", mark: tuple[int, int] | None = None,
                hidden: bool = False) -> go.Figure:
    """A small matrix with its numbers printed in the cells. −∞ cells (masked) are grey and read '−∞'.
    kind 'weights' (sequential 0..1), 'scores' (diverging) or 'values' (diverging). `hidden` draws the
    grid with '?' in every cell (quiz mode)."""
    a = np.asarray(m, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]  # [n] → [n, 1]: a vector as one column
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
    cells = go.Heatmap(z=z, x=x, y=y, text=text, texttemplate="%{text}", showscale=False,
                       textfont={"size": font_size(present) + 1}, hoverongaps=False, xgap=2, ygap=2,
                       hovertemplate="row %{y} · column %{x}<br>%{text}<extra></extra>", **kw)
    # masked cells are NaN (no text from the heatmap): print '−∞' over them
    masked = go.Scatter(x=[j for i in range(ny) for j in range(nx) if not finite[i, j]],
                        y=[i for i in range(ny) for j in range(nx) if not finite[i, j]], mode="text",
                        text=["?" if hidden else "−∞"] * int((~finite).sum()), textfont={"size": font_size(present) + 1},
                        hoverinfo="skip", showlegend=False)
    axis = {"tickmode": "array", "showgrid": False, "zeroline": False}
    shapes = [] if mark is None else [{"type": "rect", "x0": mark[1] - 0.5, "x1": mark[1] + 0.5, "y0": mark[0] - 0.5,
                                       "y1": mark[0] + 0.5, "line": {"color": "#ff7f0e", "width": 4}}]
    cell = 44 if present else 36
    return go.Figure([cells, masked], layout(
        title, present, int(90 + cell * ny), top=80 if title else 30, plot_bgcolor=MASKED_BG, meta={"shape": [ny, nx]},
        shapes=shapes, xaxis=axis | {"tickvals": x, "ticktext": [esc(c, 12) for c in col_labels], "side": "top"},
        yaxis=axis | {"tickvals": y, "ticktext": [esc(r, 12) for r in row_labels], "autorange": "reversed"}))


def table_heatmap(z, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
                  diverging: bool = True, value_name: str = "value") -> go.Figure:
    """A plain numeric matrix (positions × dimensions, positions × positions, …) on integer axes."""
    a = np.array(z, dtype=np.float32)
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
    fig.update_xaxes(title=xlabel, showgrid=False, zeroline=False)
    fig.update_yaxes(title=ylabel, showgrid=False, zeroline=False, autorange="reversed")
    return apply_layout(fig, title, present, 420, plot_bgcolor=MASKED_BG, meta={"shape": [ny, nx]})


def delta_grid(z, rows, cols, tolerance: float, *, title: str = "", present: bool = False) -> go.Figure:
    """A sites × comparisons grid of max |Δ| values, printed in scientific notation, coloured by log10."""
    z = np.asarray(z, dtype=np.float64)
    lz = np.log10(log_floor(z))
    x, y = np.arange(z.shape[1]), np.arange(z.shape[0])
    fig = go.Figure(go.Heatmap(
        z=lz, x=x, y=y, customdata=z, text=[[f"{v:.1e}" for v in r] for r in z], texttemplate="%{text}",
        textfont={"size": font_size(present)}, colorscale="Greens_r", zmin=np.log10(FLOOR), zmax=np.log10(tolerance),
        colorbar={"title": {"text": "log10 |Δ|"}, "thickness": 14},
        hovertemplate="%{y}<br>%{x}<br>max |Δ| %{customdata:.3g}<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 40) for c in cols], side="top", showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 40) for r in rows], autorange="reversed",
                     showgrid=False)
    return apply_layout(fig, title, present, int(max(240, 90 + 40 * z.shape[0])), meta={"shape": list(z.shape)})


def neuron_grid(q, k, product, *, title: str = "", present: bool = False, per_row: int = 8) -> go.Figure:
    """q, k and q⊙k of one query–key pair ([d_head] each) as a number grid wrapped to `per_row` dimensions a
    row, so every number fits its cell on a projector: rows "q d0–7", "k d0–7", "q⊙k d0–7", "q d8–15", …;
    column j of a row is dimension (row's first) + j. Three plain rows when d_head ≤ per_row or does not
    divide by it."""
    vecs = np.stack([q, k, product]).astype(np.float64)  # [3, d]
    d = vecs.shape[1]
    if d <= per_row or d % per_row:
        return number_grid(vecs, ["q", "k", "q⊙k"], [f"d{i}" for i in range(d)], title=title, present=present)
    chunks = d // per_row
    m = vecs.reshape(3, chunks, per_row).transpose(1, 0, 2).reshape(3 * chunks, per_row)  # [3, d] -> [3·chunks, per_row]
    rows = [f"{n} d{c * per_row}–{(c + 1) * per_row - 1}" for c in range(chunks) for n in ("q", "k", "q⊙k")]
    return number_grid(m, rows, [f"+{j}" for j in range(per_row)], title=title, present=present)


def scaled_rows(rows: dict[str, tuple], col_labels, *, title: str = "", present: bool = False,
                fmt: str = ".2f") -> go.Figure:
    """Rows of different quantities over the same columns, each row on its own colour scale with its own colour
    bar beside it: {row name: (values [n], zmin, zmax)} (scores of 0–44 and weights of 0–1 side by side)."""
    n = len(rows)
    x = np.arange(len(col_labels))
    traces = []
    for i, (name, (v, lo, hi)) in enumerate(rows.items()):
        bar = {"title": {"text": esc(name, 12)}, "thickness": 14, "len": 0.9 / n, "y": 1 - (i + 0.5) / n,
               "yanchor": "middle"}
        traces.append(go.Heatmap(z=np.asarray(v, dtype=np.float64)[None, :], x=x, y=[i], zmin=lo, zmax=hi,
                                 colorscale=THEME_SCALE, colorbar=bar, texttemplate=f"%{{z:{fmt}}}",
                                 textfont={"size": font_size(present) - 1}, name=name,
                                 hovertemplate=f"{esc(name, 30)} · %{{x}}<br>%{{z:.4f}}<extra></extra>"))
    fig = go.Figure(traces)
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 30) for c in col_labels], side="top",
                     showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=list(range(n)), ticktext=[esc(r, 40) for r in rows],
                     autorange="reversed", showgrid=False)
    return apply_layout(fig, title, present, int(max(260, 60 + 44 * n + 110)), top=100 if title else 50,
                        plot_bgcolor=MASKED_BG)
