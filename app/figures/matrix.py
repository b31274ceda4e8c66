"""One [query, key] matrix as a heatmap, and the marks drawn on one.

* Integer axes with escaped token tick labels, so repeated tokens never merge; masked cells are NaN on the
  grey background; hover shows the query token, the key token and the value.
* A matrix larger than MAX_SIDE per side is pooled (analysis.attention.pooling) and says so in its title; one with
  more than PNG_CELLS cells is sent as a colour-mapped PNG instead of a float array.
* The head matrix the browser switches itself is built on this one (app/figures/switcher.py).
* Marks: the cached steps of a stitched matrix (KV cache), circles on a reference alignment (cross-attention).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import threading
from collections import OrderedDict
from functools import lru_cache

import numpy as np
import plotly.express as px
import plotly.graph_objects as go
from attnlab.analysis.attention.pooling import pool_matrix
from attnlab.app.figures.style import (
    DIVERGING,
    MASKED_BG,
    THEME_SCALE,
    esc,
    font_size,
    layout,
    tick_labels,
)

MAX_SIDE = 512  # cells per side before pooling
HOVER_TEXT_CELLS = 4_096  # per-cell hover labels (query and key token) up to 64×64 cells: they dominate the payload
PNG_CELLS = 120_000  # above this, a single matrix is sent as a PNG (no per-cell hover)
LIGHT_SCALE = "Blues"  # a PNG has no theme: these two stand in for the theme's scale (see png_scale)
DARK_SCALE = "Viridis"


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


def png_scale() -> str:
    """The colour scale of a matrix sent as a PNG, which the theme cannot recolour: the one that reads like the
    theme's own sequential scale (light → dark on a light page, dark → bright on a dark one)."""
    return DARK_SCALE if is_dark() else LIGHT_SCALE


def block_labels(tokens, edges, limit: int) -> list[str]:
    """Labels of pooled blocks: the token for a block of one, else 'i–j'."""
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        out.append(esc(tokens[a], limit) if b - a == 1 else f"{a}–{b - 1}")
    return out


@lru_cache(maxsize=16)
def _lut(scale: str) -> np.ndarray:
    """The 256 RGB colours [256, 3] of a named colour scale."""
    return np.array([[int(c) for c in s[4:-1].split(",")] for s in
                     px.colors.sample_colorscale(scale, np.linspace(0, 1, 256))], dtype=np.uint8)


def colour_png(z: np.ndarray, scale: str, zmin: float, zmax: float) -> np.ndarray:
    """Map z [q, k] to RGBA uint8 through a 256-entry LUT; NaN becomes the masked grey."""
    lut = _lut(scale)
    t = np.clip((np.nan_to_num(z, nan=zmin) - zmin) / max(zmax - zmin, 1e-12), 0, 1)
    rgba = np.empty(z.shape + (4,), dtype=np.uint8)
    rgba[..., :3] = lut[(t * 255).astype(np.int64)]
    rgba[..., 3] = 255
    rgba[np.isnan(z)] = (128, 128, 128, 90)
    return rgba


_PNGS: OrderedDict = OrderedDict()  # (digest of z, scale, zmin, zmax) → data URI: the last PNG_CACHE made
_PNG_LOCK = threading.Lock()
PNG_CACHE = 128  # a few pages' worth of heads at T = 512 (each image ~10–60 kB)


def png_of(z: np.ndarray, scale: str, zmin: float, zmax: float) -> str:
    """The PNG data URI of z [q, k] coloured by `scale` over [zmin, zmax], encoded once: a query-token or
    matrix-kind change rebuilds the head matrix with the same heads (~25 ms each to colour and encode at T=512)."""
    key = (hashlib.blake2b(np.ascontiguousarray(z).tobytes(), digest_size=16).digest(), z.shape, z.dtype.str, scale, zmin, zmax)
    with _PNG_LOCK:
        if key in _PNGS:
            _PNGS.move_to_end(key)
            return _PNGS[key]
    uri = _png_uri(colour_png(z, scale, zmin, zmax))
    with _PNG_LOCK:
        _PNGS[key] = uri
        while len(_PNGS) > PNG_CACHE:
            _PNGS.popitem(last=False)
    return uri


def _png_uri(rgba: np.ndarray) -> str:
    """An RGBA uint8 image [h, w, 4] as a PNG data URI (what px.imshow(binary_string=True) sends)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="png", compress_level=4)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def masked(m, mask) -> np.ndarray:
    """m as float32 [q, k] with NaN where `mask` is False or the value is not finite (−inf shows as masked)."""
    z = np.array(m, dtype=np.float32)  # [q, k]
    if mask is not None:
        z = np.where(np.asarray(mask, bool), z, np.nan)
    return np.where(np.isfinite(z), z, np.nan)


def zlimits(z: np.ndarray, kind: str) -> tuple[float, float]:
    """Colour range: 0..max for a pattern, ±max|z| (diverging around 0) otherwise."""
    finite = z[np.isfinite(z)]
    if kind == "pattern":
        return 0.0, float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    lim = float(np.abs(finite).max()) if finite.size else 1.0
    return -lim or -1.0, lim or 1.0


def matrix_heatmap(m, q_tokens, k_tokens, *, mask=None, kind: str = "pattern", title: str = "",
                   present: bool = False, pool: str = "max", max_side: int = MAX_SIDE,
                   zrange: tuple[float, float] | None = None, height: int | None = None,
                   q_offset: int = 0, k_offset: int = 0, value_name: str | None = None,
                   mark: tuple[int | None, int | None] = (None, None), max_ticks: int | None = None,
                   showscale: bool = True, square: bool = True, png_cells: int = PNG_CELLS,
                   index_ticks: bool = False, every_row: bool = False) -> go.Figure:
    """One [q, k] matrix on integer axes: NaN where `mask` is False, token tick labels, hover with
    query token, key token and value. kind 'pattern' (sequential, 0..max) or 'scores'/'diff'
    (diverging around 0). Pooled above `max_side` cells per side; `q_offset`/`k_offset` number the
    rows/columns of a zoom window by their absolute positions. `mark` = (query row, key column) to outline.
    Above `png_cells` cells (after pooling) the matrix goes as a colour-mapped PNG. `index_ticks` labels
    each tick "i token" with its absolute position (a projector close-up). `every_row` labels every query row
    whatever `max_ticks` (keys are still labelled every few columns past it).
    """
    z = masked(m, mask)  # [q, k]
    nq, nk = z.shape
    q_tokens, k_tokens = list(q_tokens)[q_offset:q_offset + nq], list(k_tokens)[k_offset:k_offset + nk]
    pooled = max(nq, nk) > max_side
    limit = 10 if max(nq, nk) > 48 else 14
    if pooled:
        z, qe, ke = pool_matrix(z, max_side, pool)  # [ny, nx] ≤ max_side per side; block edges [ny + 1], [nx + 1]
        ylab, xlab = block_labels(q_tokens, qe, limit), block_labels(k_tokens, ke, limit)
        title = f"{title} — pooled ({pool} over {qe[1] - qe[0]}×{ke[1] - ke[0]} blocks)"
    else:
        ylab, xlab = tick_labels(q_tokens, limit), tick_labels(k_tokens, limit)
        if index_ticks:
            ylab = [f"{q_offset + i} {t}" for i, t in enumerate(ylab)]
            xlab = [f"{k_offset + j} {t}" for j, t in enumerate(xlab)]
    ny, nx = z.shape
    value_name = value_name or {"pattern": "weight", "scores": "score", "diff": "Δ"}.get(kind, "value")
    scale = THEME_SCALE if kind == "pattern" else DIVERGING
    zmin, zmax = zrange or zlimits(z, kind)
    x, y = np.arange(nx) + (0 if pooled else k_offset), np.arange(ny) + (0 if pooled else q_offset)
    if z.size > png_cells:
        trace = go.Image(source=png_of(z, scale or png_scale(), zmin, zmax), x0=x[0], dx=1, y0=y[0], dy=1,
                         hovertemplate="query %{y}<br>key %{x}<extra></extra>")
    else:
        labels = z.size <= HOVER_TEXT_CELLS  # per-cell token labels in the hover
        trace = go.Heatmap(z=z, x=x, y=y, colorscale=scale, zmin=zmin, zmax=zmax, hoverongaps=False,
                           showscale=showscale, colorbar={"title": {"text": value_name}, "thickness": 14},
                           text=[[f"{yl} → {xl}" for xl in xlab] for yl in ylab] if labels else None,
                           hovertemplate="query %{y} → key %{x}" + ("<br>%{text}" if labels else "")
                           + f"<br>{value_name} %{{z:.4f}}<extra></extra>")
    step = max(1, int(np.ceil(max(ny, nx) / (max_ticks or (40 if present else 64)))))
    axis = {"tickmode": "array", "showgrid": False, "zeroline": False, "tickfont": {"size": font_size(present) - 2}}
    upright = max((len(html.unescape(t)) for t in xlab[::step]), default=0) <= 2  # bytes, digits: level labels
    xaxis = axis | {"tickvals": x[::step], "ticktext": xlab[::step], "tickangle": 0 if upright else -60,
                    "title": {"text": "key"},
                    "side": "bottom"}
    ystep = 1 if every_row else step
    yaxis = axis | {"tickvals": y[::ystep], "ticktext": ylab[::ystep], "title": {"text": "query"},
                    "autorange": "reversed"}
    if square:  # one cell = one square, whatever the column width
        yaxis |= {"scaleanchor": "x", "scaleratio": 1, "constrain": "domain"}
        xaxis["constrain"] = "domain"
    shapes, (qm, km) = [], mark
    if qm is not None and not pooled and q_offset <= qm < q_offset + ny:  # the query row, across the plot
        shapes.append({"type": "rect", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": qm - 0.5,
                       "y1": qm + 0.5, "line": {"color": "#ff7f0e", "width": 2}, "fillcolor": "rgba(0,0,0,0)"})
    if km is not None and not pooled and k_offset <= km < k_offset + nx:  # the key column
        shapes.append({"type": "rect", "yref": "y domain", "y0": 0, "y1": 1, "xref": "x", "x0": km - 0.5,
                       "x1": km + 0.5, "line": {"color": "#d62728", "width": 2, "dash": "dot"},
                       "fillcolor": "rgba(0,0,0,0)"})
    auto_h = int(min(700 if present else 620, max(360, ny * (18 if present else 14) + 160)))
    # one layout dict: Plotly's update_* calls cost ~5 ms each, and every page run builds these figures
    lay = layout(title, present, height or auto_h, xaxis=xaxis, yaxis=yaxis, shapes=shapes, plot_bgcolor=MASKED_BG,
                 meta={"pooled": bool(pooled), "shape": [ny, nx], "kind": kind} | ({"every_row": True} if every_row else {}))
    lay["margin"] |= label_margins(xlab[::step], ylab[::ystep], font_size(present) - 2,
                                   trace.type == "heatmap" and showscale)
    lay["margin"]["autoexpand"] = False  # the margins hold the labels: nothing pushes them, one draw per change
    return go.Figure([trace], lay)


def colour_ramp(zrange: tuple[float, float], *, kind: str = "pattern", value_name: str | None = None,
                present: bool = False) -> go.Figure:
    """The colour scale of matrices drawn without their own colour bar (showscale=False, the same `zrange` and
    `kind`), as one horizontal strip over its values: one bar shared by charts side by side."""
    zmin, zmax = zrange
    v = np.linspace(zmin, zmax, 256)  # [256] the values along the strip
    name = value_name or {"pattern": "weight", "scores": "score", "diff": "Δ"}.get(kind, "value")
    trace = go.Heatmap(z=v[None, :], x=v, y=[0], colorscale=THEME_SCALE if kind == "pattern" else DIVERGING,
                       zmin=zmin, zmax=zmax, showscale=False, hovertemplate=f"{name} %{{x:.4g}}<extra></extra>")
    lay = layout("", present, 4 * font_size(present) + 44, top=8,
                 xaxis={"title": {"text": name, "standoff": 4}, "showgrid": False, "zeroline": False, "nticks": 8,
                        "fixedrange": True}, yaxis={"visible": False, "fixedrange": True})
    lay["margin"] |= {"b": int(2.8 * font_size(present)) + 6, "l": 20, "r": 20}  # the value ticks and their title
    return go.Figure([trace], lay)


def label_margins(xlab, ylab, size: int, colorbar: bool) -> dict:
    """Left, bottom and right margins that hold the tick labels (x at −60°, y level), the axis titles and the
    colour bar, estimated from the labels' lengths a little generously: Plotly's automargin then finds nothing
    to push, and draws each chart once instead of twice (half the browser's time per widget change on Masks)."""
    def longest(labels):
        return max((len(html.unescape(str(t))) for t in labels), default=1)
    char = 0.62 * size  # px per character, a little over the Source Sans average
    return {"l": int(longest(ylab) * char + 2 * size + 16), "b": int(longest(xlab) * char * 0.87 + 2 * size + 20),
            "r": 90 if colorbar else 10}


# -- marks on a matrix -------------------------------------------------------------------------------------
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


def mark_cells(fig: go.Figure, cells, *, name: str = "reference alignment") -> go.Figure:
    """Circles on (row, column) cells of a heatmap, e.g. a translation's word alignment; their legend in a row of
    its own at the bottom, under the axis title."""
    cells = list(cells)
    if cells:
        fig.add_trace(go.Scatter(x=[c for _, c in cells], y=[r for r, _ in cells], mode="markers", name=name,
                                 marker={"symbol": "circle-open", "size": 14, "color": "#ff7f0e",
                                         "line": {"width": 2.5}},
                                 hovertemplate="reference: target %{y} ↔ source %{x}<extra></extra>"))
        row = int(2.6 * (fig.layout.font.size or 13))  # px: one legend row, under the key axis's title
        fig.update_layout(showlegend=True, legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom",
                                                   "x": 0, "xanchor": "left"},
                          margin_b=(fig.layout.margin.b or 0) + row, height=(fig.layout.height or 450) + row)
    return fig
