"""Plotly figure builders for attention matrices: one trace where one will do.

* Token labels are plain text: every label is HTML-escaped before it reaches Plotly (which reads
  `<b>` as markup), and matrices sit on integer axes so repeated tokens never merge.
* Masked cells are NaN and show the grey plot background ("grey = masked").
* The all-heads mosaic is ONE heatmap with NaN gutters, not a subplot per head.
* A matrix larger than MAX_SIDE per side is pooled (analysis.pooling) and says so in its title;
  a very large one is sent as a colour-mapped PNG instead of a float array.
"""

from __future__ import annotations

import html
import re

import numpy as np
import plotly.express as px
import plotly.graph_objects as go

from analysis.pooling import pool_matrix

MAX_SIDE = 512  # cells per side before pooling
MOSAIC_CELLS = 150_000  # cells in the all-heads mosaic before each head is pooled
HOVER_TEXT_CELLS = 4_096  # per-cell hover labels (query and key token) up to 64×64 cells: they dominate the payload
PNG_CELLS = 120_000  # above this, a single matrix is sent as a PNG (no per-cell hover)
MASKED_BG = "rgba(128,128,128,0.28)"
LIGHT_SCALE = "Blues"  # a PNG has no theme: these two stand in for the theme's scale (see png_scale)
DARK_SCALE = "Viridis"
DIVERGING = "RdBu_r"
THEME_SCALE = None  # no colorscale: the Streamlit theme's own sequential scale, which the browser adapts to light and dark
# Saturated colours, readable on light and dark themes; orange and red are kept for the query/source marks.
HEAD_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
               *px.colors.qualitative.Dark24]


# -- labels ------------------------------------------------------------------------------------------------
def esc(label: str, limit: int = 14) -> str:
    """A token label safe for Plotly text: shortened, then `&`, `<`, `>` escaped."""
    s = str(label)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=False)


def md(label: str, limit: int = 30) -> str:
    """A token label safe inside st.markdown / st.caption / st.subheader: shortened, then set as an inline
    code span (fenced by more backticks than it holds), so `[x](url)`, bare URLs, `**`, `$…$` or `<b>` in a
    token show as typed — backslash escapes would not stop Markdown from auto-linking a bare URL."""
    s = str(label)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    if not s:
        return ""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""  # CommonMark strips one space from each side
    return f"{fence}{pad}{s}{pad}{fence}"


def tick_labels(tokens, limit: int = 14) -> list[str]:
    return [esc(t, limit) for t in tokens]


def _font(present: bool) -> int:
    return 18 if present else 13


def _layout(fig: go.Figure, title: str, present: bool, height: int | None = None, top: int | None = None,
            **kw) -> go.Figure:
    fig.update_layout(title={"text": title, "font": {"size": _font(present) + 3}}, font={"size": _font(present)},
                      margin={"l": 10, "r": 10, "t": top or (60 if title else 20), "b": 10}, height=height, **kw)
    return fig


def png_scale() -> str:
    """The colour scale of a matrix sent as a PNG, which the theme cannot recolour: the one that reads like the
    theme's own sequential scale (light → dark on a light page, dark → bright on a dark one)."""
    return DARK_SCALE if is_dark() else LIGHT_SCALE


def is_dark() -> bool:
    """The browser's theme (Streamlit reports it from the second run on), else the server's theme.base."""
    import streamlit as st  # only here: the builders themselves need no Streamlit

    try:
        kind = st.context.theme.type
    except Exception:  # noqa: BLE001 — no browser context (tests, the bench command)
        kind = None
    if kind is None:
        kind = st.get_option("theme.base")
    return kind == "dark"


# -- single matrix -----------------------------------------------------------------------------------------
def _block_labels(tokens, edges, limit: int) -> list[str]:
    """Labels of pooled blocks: the token for a block of one, else 'i–j'."""
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        out.append(esc(tokens[a], limit) if b - a == 1 else f"{a}–{b - 1}")
    return out


def _colour_png(z: np.ndarray, scale: str, zmin: float, zmax: float) -> np.ndarray:
    """Map z [q, k] to RGBA uint8 through a 256-entry LUT; NaN becomes the masked grey."""
    lut = np.array([[int(c) for c in s[4:-1].split(",")] for s in
                    px.colors.sample_colorscale(scale, np.linspace(0, 1, 256))], dtype=np.uint8)
    t = np.clip((np.nan_to_num(z, nan=zmin) - zmin) / max(zmax - zmin, 1e-12), 0, 1)
    rgba = np.empty(z.shape + (4,), dtype=np.uint8)
    rgba[..., :3] = lut[(t * 255).astype(np.int64)]
    rgba[..., 3] = 255
    rgba[np.isnan(z)] = (128, 128, 128, 90)
    return rgba


def matrix_heatmap(m, q_tokens, k_tokens, *, mask=None, kind: str = "pattern", title: str = "",
                   present: bool = False, pool: str = "max", max_side: int = MAX_SIDE,
                   zrange: tuple[float, float] | None = None, height: int | None = None,
                   q_offset: int = 0, k_offset: int = 0, value_name: str | None = None,
                   mark: tuple[int | None, int | None] = (None, None), max_ticks: int | None = None,
                   showscale: bool = True, square: bool = True) -> go.Figure:
    """One [q, k] matrix on integer axes: NaN where `mask` is False, token tick labels, hover with
    query token, key token and value. kind 'pattern' (sequential, 0..max) or 'scores'/'diff'
    (diverging around 0). Pooled above `max_side` cells per side; `q_offset`/`k_offset` number the
    rows/columns of a zoom window by their absolute positions. `mark` = (query row, key column) to outline.
    """
    z = np.array(m, dtype=np.float32)
    if mask is not None:
        z = np.where(np.asarray(mask, bool), z, np.nan)
    z = np.where(np.isfinite(z), z, np.nan)  # −inf (masked scores) shows as masked
    nq, nk = z.shape
    q_tokens, k_tokens = list(q_tokens)[q_offset:q_offset + nq], list(k_tokens)[k_offset:k_offset + nk]
    pooled = max(nq, nk) > max_side
    limit = 10 if max(nq, nk) > 48 else 14
    if pooled:
        z, qe, ke = pool_matrix(z, max_side, pool)
        ylab, xlab = _block_labels(q_tokens, qe, limit), _block_labels(k_tokens, ke, limit)
        title = f"{title} — pooled ({pool} over {qe[1] - qe[0]}×{ke[1] - ke[0]} blocks)"
    else:
        ylab, xlab = tick_labels(q_tokens, limit), tick_labels(k_tokens, limit)
    ny, nx = z.shape
    finite = z[np.isfinite(z)]
    value_name = value_name or {"pattern": "weight", "scores": "score", "diff": "Δ"}.get(kind, "value")
    if kind == "pattern":
        scale = THEME_SCALE
        zmin, zmax = zrange or (0.0, float(finite.max()) if finite.size and finite.max() > 0 else 1.0)
    else:
        scale = DIVERGING
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        zmin, zmax = zrange or (-lim or -1.0, lim or 1.0)
    x, y = np.arange(nx) + (0 if pooled else k_offset), np.arange(ny) + (0 if pooled else q_offset)
    fig = go.Figure()
    if z.size > PNG_CELLS:
        img = px.imshow(_colour_png(z, scale or png_scale(), zmin, zmax), binary_string=True).data[0]
        img.update(x0=x[0], dx=1, y0=y[0], dy=1, hovertemplate="query %{y}<br>key %{x}<extra></extra>")
        fig.add_trace(img)
    else:
        trace = go.Heatmap(z=z, x=x, y=y, colorscale=scale, zmin=zmin, zmax=zmax, hoverongaps=False,
                           showscale=showscale, colorbar={"title": {"text": value_name}, "thickness": 14})
        if z.size <= HOVER_TEXT_CELLS:
            trace.update(text=[[f"{yl} → {xl}" for xl in xlab] for yl in ylab],
                         hovertemplate=f"query %{{y}} → key %{{x}}<br>%{{text}}<br>{value_name} %{{z:.4f}}<extra></extra>")
        else:
            trace.update(hovertemplate=f"query %{{y}} → key %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>")
        fig.add_trace(trace)
    step = max(1, int(np.ceil(max(ny, nx) / (max_ticks or (40 if present else 64)))))
    axis = {"tickmode": "array", "showgrid": False, "zeroline": False, "tickfont": {"size": _font(present) - 2}}
    fig.update_xaxes(**axis, tickvals=x[::step], ticktext=xlab[::step], tickangle=-60, title="key", side="bottom")
    fig.update_yaxes(**axis, tickvals=y[::step], ticktext=ylab[::step], title="query", autorange="reversed")
    if square:  # one cell = one square, whatever the column width
        fig.update_yaxes(scaleanchor="x", scaleratio=1, constrain="domain")
        fig.update_xaxes(constrain="domain")
    qm, km = mark
    if qm is not None and not pooled and q_offset <= qm < q_offset + ny:
        fig.add_hrect(y0=qm - 0.5, y1=qm + 0.5, line={"color": "#ff7f0e", "width": 2}, fillcolor="rgba(0,0,0,0)")
    if km is not None and not pooled and k_offset <= km < k_offset + nx:
        fig.add_vrect(x0=km - 0.5, x1=km + 0.5, line={"color": "#d62728", "width": 2, "dash": "dot"},
                      fillcolor="rgba(0,0,0,0)")
    auto_h = int(min(700 if present else 620, max(360, ny * (18 if present else 14) + 160)))
    _layout(fig, title, present, height or auto_h, plot_bgcolor=MASKED_BG,
            meta={"pooled": bool(pooled), "shape": [ny, nx], "kind": kind})
    return fig


# -- all heads ---------------------------------------------------------------------------------------------
def mosaic(stack, q_tokens, k_tokens, *, mask=None, kind: str = "pattern", title: str = "", present: bool = False, pool: str = "max", layer_labels=None, height: int | None = None,
           max_cells: int = MOSAIC_CELLS) -> go.Figure:
    """Every layer × head of `stack` [L, H, q, k] as ONE heatmap with NaN gutters between heads.

    Rows are layers, columns heads. Axes are categorical with a unique name per row/column
    ("L1 · 7 cat"), so hover shows layer, head, query and key token without per-cell data; tick
    labels name the heads and layers. Heads are pooled when the whole mosaic exceeds `max_cells`.
    """
    a = np.array(stack, dtype=np.float32)
    n_layers, n_heads, nq, nk = a.shape
    if mask is not None:
        a = np.where(np.asarray(mask, bool), a, np.nan)
    a = np.where(np.isfinite(a), a, np.nan)
    qe, ke = np.arange(nq + 1), np.arange(nk + 1)
    pooled = n_layers * n_heads * nq * nk > max_cells
    if pooled:
        side = max(2, int(np.sqrt(max_cells / (n_layers * n_heads))))
        a, qe, ke = pool_matrix(a, side, pool)
        title = f"{title} — pooled ({pool} over {qe[1] - qe[0]}-token blocks)"
    pq, pk = a.shape[-2:]
    gap = 1 if max(pq, pk) <= 24 else max(1, round(max(pq, pk) / 24))
    rows, cols = n_layers * (pq + gap) - gap, n_heads * (pk + gap) - gap
    z = np.full((rows, cols), np.nan, dtype=np.float32)
    for layer in range(n_layers):
        for h in range(n_heads):
            r0, c0 = layer * (pq + gap), h * (pk + gap)
            z[r0:r0 + pq, c0:c0 + pk] = a[layer, h]
    limit = 10
    qlab = _block_labels(list(q_tokens), qe, limit) if pooled else tick_labels(q_tokens, limit)
    klab = _block_labels(list(k_tokens), ke, limit) if pooled else tick_labels(k_tokens, limit)
    layer_labels = list(layer_labels) if layer_labels is not None else [f"L{i}" for i in range(n_layers)]
    y, x = [], []
    for layer in range(n_layers):
        y += [f"{layer_labels[layer]} · {i} {qlab[i]}" for i in range(pq)]
        if layer < n_layers - 1:
            y += [f"gap {layer}.{g}" for g in range(gap)]
    for h in range(n_heads):
        x += [f"H{h} · {j} {klab[j]}" for j in range(pk)]
        if h < n_heads - 1:
            x += [f"gap {h}.{g}" for g in range(gap)]
    finite = z[np.isfinite(z)]
    if kind == "pattern":
        scale, zmin, zmax = THEME_SCALE, 0.0, float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    else:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        scale, zmin, zmax = DIVERGING, -lim, lim
    vname = {"pattern": "weight", "scores": "score", "diff": "Δ"}.get(kind, "value")
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=y, colorscale=scale, zmin=zmin, zmax=zmax, hoverongaps=False,
        colorbar={"title": {"text": vname}, "thickness": 14},
        hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{vname} %{{z:.4f}}<extra></extra>"))
    fig.update_xaxes(type="category", tickmode="array", tickvals=[x[h * (pk + gap) + pk // 2] for h in range(n_heads)],
                     ticktext=[f"head {h}" for h in range(n_heads)], showgrid=False, side="bottom")
    fig.update_yaxes(type="category", tickmode="array", autorange="reversed",
                     tickvals=[y[layer * (pq + gap) + pq // 2] for layer in range(n_layers)],
                     ticktext=[str(s) for s in layer_labels], showgrid=False)
    cell = max(3, min(14, int(700 / max(rows, 1) * 1.0)))
    _layout(fig, title, present, height or int(min(1000, max(420, rows * cell + 160))), plot_bgcolor="rgba(0,0,0,0)",
            meta={"pooled": bool(pooled), "shape": [rows, cols], "heads": n_heads, "layers": n_layers,
                  "cell": [pq, pk], "gap": gap})
    return fig


# -- head view (BertViz-style lines) ------------------------------------------------------------------------
def head_view(patterns, q_tokens, k_tokens, query: int, heads, *, present: bool = False, title: str = "",
              bins: int = 6, min_weight: float = 0.02) -> go.Figure:
    """Lines from query token `query` (left) to every key (right); line opacity and width grow with
    the weight relative to the largest weight of that row. patterns [H, q, k]; one colour per head in
    `heads`. Weights are bucketed into `bins` levels, so each head needs at most `bins` line traces;
    weights below `min_weight` × the row's largest are not drawn."""
    p = np.asarray(patterns, dtype=np.float64)
    nq, nk = p.shape[-2:]
    n = max(nq, nk)
    yq, yk = -np.arange(nq) * (n / max(nq, 1)), -np.arange(nk) * (n / max(nk, 1))
    fig = go.Figure()
    heads = list(heads)
    for idx, h in enumerate(heads):
        w = p[h, query]
        rel = w / w.max() if w.max() > 0 else w
        color = HEAD_COLORS[h % len(HEAD_COLORS)]
        dy = (idx - (len(heads) - 1) / 2) * 0.12
        levels = np.minimum((rel * bins).astype(int), bins - 1)
        first = True
        for lvl in range(bins):
            ks = np.nonzero((levels == lvl) & (rel >= min_weight))[0]
            if ks.size == 0:
                continue
            xs, ys = [], []
            for k in ks:
                xs += [0.18, 0.82, None]
                ys += [yq[query] + dy, yk[k] + dy, None]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", line={"color": color, "width": 1 + 6 * ((lvl + 1) / bins) ** 1.5},
                opacity=0.15 + 0.85 * ((lvl + 1) / bins) ** 2, hoverinfo="skip", legendgroup=f"h{h}",
                name=f"head {h}", showlegend=first))
            first = False
        if first:  # nothing above min_weight: keep a legend entry
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"color": color}, name=f"head {h}"))
    size = _font(present)
    qlab = tick_labels(q_tokens, 18)
    fig.add_trace(go.Scatter(
        x=[0.16] * nq, y=yq, mode="text", text=[("" if i == query else t) for i, t in enumerate(qlab)],
        textposition="middle left", textfont={"size": size}, showlegend=False, customdata=np.arange(nq),
        hovertemplate="query %{customdata}: %{text}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[0.16], y=[yq[query]], mode="text+markers", text=[qlab[query]], textposition="middle left",
        marker={"color": "#ff7f0e", "size": 10, "symbol": "circle"}, textfont={"size": size + 1, "color": "#ff7f0e"},
        showlegend=False, hovertemplate=f"query {query}: %{{text}}<extra></extra>"))
    mean_w = p[heads, query].mean(0) if heads else np.zeros(nk)
    fig.add_trace(go.Scatter(
        x=[0.84] * nk, y=yk, mode="text", text=tick_labels(k_tokens, 18), textposition="middle right",
        textfont={"size": size}, showlegend=False, customdata=mean_w,
        hovertemplate="key: %{text}<br>mean weight %{customdata:.3f}<extra></extra>"))
    fig.update_xaxes(visible=False, range=[-0.25, 1.25])
    fig.update_yaxes(visible=False, range=[-n + 0.3, 1.2])
    h_px = int(min(1600, max(360, n * (size + 9) + 120)))
    return _layout(fig, title, present, h_px, legend={"orientation": "h", "y": 1.02, "x": 0},
                   meta={"query": int(query), "heads": heads})


# -- small charts ------------------------------------------------------------------------------------------
def token_bars(values, tokens, *, title: str = "", present: bool = False, highlight=None, name: str = "value",
               color: str = "#1f77b4") -> go.Figure:
    """A bar per token (integer x axis, escaped tick labels)."""
    v = np.asarray(values, dtype=np.float64)
    x = np.arange(len(v))
    colors = [("#d62728" if highlight is not None and i == highlight else color) for i in x]
    fig = go.Figure(go.Bar(x=x, y=v, marker_color=colors, text=tick_labels(tokens, 12),
                           hovertemplate=f"%{{x}} %{{text}}<br>{name} %{{y:.4f}}<extra></extra>",
                           textposition="none"))
    step = max(1, len(v) // (40 if present else 70))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=tick_labels(tokens, 12)[::step], tickangle=-60)
    fig.update_yaxes(title=name)
    return _layout(fig, title, present, 360)


def method_rows(rows: dict, tokens, *, title: str = "", present: bool = False,
                source: int | None = None, exclude: int | None = None) -> go.Figure:
    """Several [T] relevance rows (one per method), each scaled to its own max, as one heatmap.
    `exclude`: a position left out of the max (the query token, which often dominates its own row)."""
    names = list(rows)
    z = np.stack([np.asarray(rows[n], dtype=np.float64) for n in names])  # [M, T]
    others = np.delete(z, exclude, axis=1) if exclude is not None and z.shape[1] > 1 else z
    top = np.nanmax(np.abs(others), axis=1, keepdims=True)
    zn = np.clip(np.divide(z, top, out=np.zeros_like(z), where=top > 0), 0, 1)
    x = np.arange(z.shape[1])
    labels = tick_labels(tokens, 12)
    fig = go.Figure(go.Heatmap(
        z=zn, x=x, y=names, customdata=z, colorscale=THEME_SCALE, zmin=0, zmax=1,
        text=[labels] * len(names), colorbar={"title": {"text": "share of max"}, "thickness": 14},
        hovertemplate="%{y}<br>%{x} %{text}<br>value %{customdata:.4f}<extra></extra>"))
    step = max(1, len(x) // (40 if present else 70))
    fig.update_xaxes(tickmode="array", tickvals=x[::step], ticktext=labels[::step], tickangle=-60, showgrid=False)
    fig.update_yaxes(autorange="reversed", showgrid=False)
    if source is not None:
        fig.add_vrect(x0=source - 0.5, x1=source + 0.5, line={"color": "#d62728", "width": 2, "dash": "dot"},
                      fillcolor="rgba(0,0,0,0)")
    return _layout(fig, title, present, 140 + 46 * len(names) + (20 if present else 0))


def box_stats(stack, mask) -> dict[str, np.ndarray]:
    """Per head [H]: quartiles, mean and Tukey fences (the most extreme scores within 1.5·IQR) of the
    visible scores — what a box plot draws, so the page sends 7 numbers per head, not every score."""
    a = np.asarray(stack, dtype=np.float64)
    m = np.broadcast_to(np.asarray(mask, bool), a.shape)
    out = {k: np.full(a.shape[0], np.nan) for k in ("q1", "median", "q3", "mean", "lowerfence", "upperfence")}
    for h in range(a.shape[0]):
        v = a[h][m[h]]
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
    return _layout(fig, title, present, 380)


def lines(x, series: dict, *, title: str = "", xlabel: str = "", ylabel: str = "", present: bool = False,
          log_x: bool = False, vline: float | None = None) -> go.Figure:
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        fig.add_trace(go.Scatter(x=np.asarray(x), y=np.asarray(y, dtype=np.float64), mode="lines+markers",
                                 name=name, line={"color": HEAD_COLORS[i % len(HEAD_COLORS)], "width": 3}))
    fig.update_xaxes(title=xlabel, type="log" if log_x else "linear")
    fig.update_yaxes(title=ylabel)
    if vline is not None:
        fig.add_vline(x=vline, line={"dash": "dot", "color": "#888"})
    return _layout(fig, title, present, 380, legend={"orientation": "h", "y": -0.25})


def grid_heatmap(z, row_labels, col_labels, *, title: str = "", present: bool = False, diverging: bool = True,
                 value_name: str = "value", fmt: str = ".2f") -> go.Figure:
    """A small labelled grid (e.g. layers × heads of a statistic), values printed in the cells."""
    z = np.asarray(z, dtype=np.float64)
    finite = z[np.isfinite(z)]
    lim = float(np.abs(finite).max()) if finite.size else 1.0
    kw = {"colorscale": DIVERGING, "zmin": -lim or -1, "zmax": lim or 1} if diverging else \
        {"colorscale": THEME_SCALE, "zmin": float(finite.min()) if finite.size else 0,
         "zmax": float(finite.max()) if finite.size else 1}
    x, y = np.arange(z.shape[1]), np.arange(z.shape[0])
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, texttemplate=f"%{{z:{fmt}}}", hoverongaps=False,
                               textfont={"size": _font(present) - 1},
                               colorbar={"title": {"text": value_name}, "thickness": 14},
                               hovertemplate=f"%{{y}} · %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>", **kw))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 30) for c in col_labels], side="top",
                     showgrid=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 40) for r in row_labels], autorange="reversed",
                     showgrid=False)
    return _layout(fig, title, present, int(max(260, 60 + 44 * z.shape[0] + 110)), top=100 if title else 50,
                   plot_bgcolor=MASKED_BG)
