"""Figures of the Long inputs page: a pooled overview of one head and an exact window of it.

* Overview: float32 pooled values on category axes, one category per pooled block named by its token range
  ("512–519"), so the hover reads "max of rows 512–519 × cols 0–7" with no per-cell text; tick labels are
  token positions. A few row bands (one trace each, one shared colour axis) skip the masked triangle,
  which would otherwise be half the bytes. The window shown below is outlined on it.
* Window: `matrix_heatmap` at full resolution (integer axes numbered by absolute position, escaped token
  tick labels, NaN = masked), with the hover showing each weight to float32 precision.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.style import MASKED_BG, THEME_SCALE, apply_layout, font_size

WINDOW_LINE = {"color": "#ff7f0e", "width": 2}
BANDS = 16  # horizontal bands of the overview, each sent over the columns it can see
CAP_PERCENTILE = 99.0  # the overview's colour scale tops out here (see colour_cap)


def _block_names(edges) -> list[str]:
    return [f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in zip(edges[:-1].tolist(), edges[1:].tolist())]


def row_bands(z: np.ndarray, n_bands: int = BANDS) -> list[tuple[int, int, int, int]]:
    """(r0, r1, c0, c1): horizontal bands of z [ny, nx] and the columns holding every non-NaN cell of each.
    Above a causal diagonal a band has nothing to send, so the bands carry ~half the cells of the matrix."""
    ny = z.shape[0]
    rows = max(1, -(-ny // n_bands))
    out = []
    for r0 in range(0, ny, rows):
        r1 = min(r0 + rows, ny)
        cols = np.flatnonzero(~np.isnan(z[r0:r1]).all(0))
        if cols.size:
            out.append((r0, r1, int(cols[0]), int(cols[-1]) + 1))
    return out


def overview_heatmap(pooled, q_edges, k_edges, *, how: str = "max", title: str = "", present: bool = False,
                     window: tuple[int, int, int, int] | None = None, max_ticks: int | None = None,
                     n_bands: int = BANDS) -> go.Figure:
    """A pooled [nq, nk] pattern (NaN = every cell of the block masked) whose blocks cover the token ranges
    given by `q_edges` / `k_edges`. `window` = (q0, q1, k0, k1) in token positions is outlined.

    Sent as one heatmap trace per band of rows (`row_bands`) over the columns it can see, sharing one colour
    axis: the masked triangle of a causal head is not sent (a 512×512 overview is ~0.8 MB, not 1.8 MB)."""
    z = np.asarray(pooled, dtype=np.float32)
    qe, ke = np.asarray(q_edges), np.asarray(k_edges)
    ny, nx = z.shape
    if (len(qe), len(ke)) != (ny + 1, nx + 1):
        raise ValueError(f"edges of lengths {len(qe)}, {len(ke)} do not fit a {ny}×{nx} matrix")
    y, x = _block_names(qe), _block_names(ke)
    pooled_blocks = int(qe[1] - qe[0]) > 1 or int(ke[1] - ke[0]) > 1
    if pooled_blocks:
        hover = f"{how} of rows %{{y}} × cols %{{x}}<br>{how} weight %{{z:.4g}}<extra></extra>"
    else:
        hover = "query %{y} → key %{x}<br>weight %{z:.7g}<extra></extra>"
    zmax = colour_cap(z)
    fig = go.Figure()
    for r0, r1, c0, c1 in row_bands(z, n_bands):
        fig.add_trace(go.Heatmap(z=np.ascontiguousarray(z[r0:r1, c0:c1]), x=x[c0:c1], y=y[r0:r1],
                                 coloraxis="coloraxis", hoverongaps=False, hovertemplate=hover))
    step = max(1, int(np.ceil(max(ny, nx) / (max_ticks or (12 if present else 16)))))
    axis = {"type": "category", "categoryorder": "array", "tickmode": "array", "showgrid": False,
            "tickfont": {"size": font_size(present) - 2}}
    fig.update_xaxes(**axis, categoryarray=x, range=[-0.5, nx - 0.5], tickvals=x[::step],
                     ticktext=[str(a) for a in ke[:-1:step].tolist()], title="key position", side="bottom",
                     constrain="domain")
    fig.update_yaxes(**axis, categoryarray=y, range=[ny - 0.5, -0.5], tickvals=y[::step],
                     ticktext=[str(a) for a in qe[:-1:step].tolist()], title="query position",
                     scaleanchor="x", scaleratio=1, constrain="domain")
    if window is not None:  # on a category axis a number is a category's index: block i spans i − 0.5 .. i + 0.5
        q0, q1, k0, k1 = window
        bq, bk = int(qe[1] - qe[0]), int(ke[1] - ke[0])
        fig.add_shape(type="rect", x0=k0 / bk - 0.5, x1=k1 / bk - 0.5, y0=q0 / bq - 0.5, y1=q1 / bq - 0.5,
                      line=WINDOW_LINE, fillcolor="rgba(0,0,0,0)", xref="x", yref="y")
    apply_layout(fig, title, present, 680 if present else 620, plot_bgcolor=MASKED_BG,
                 coloraxis={"colorscale": THEME_SCALE, "cmin": 0.0, "cmax": zmax,
                            "colorbar": {"title": {"text": f"{how} weight" if pooled_blocks else "weight"},
                                         "thickness": 14}},
                 meta={"pooled": pooled_blocks, "shape": [ny, nx], "block": [int(qe[1] - qe[0]), int(ke[1] - ke[0])],
                       "how": how, "window": list(window) if window is not None else None, "cmax": zmax})
    return fig


def colour_cap(z: np.ndarray, q: float = CAP_PERCENTILE) -> float:
    """The top of the colour scale: the q-th percentile of the finite values (the largest one for a small
    matrix). The first rows of a causal head see a handful of keys, so their weights are near 1 and would
    wash out every other block; above the cap a block takes the top colour, and its hover keeps its value."""
    finite = z[np.isfinite(z)]
    if not finite.size:
        return 1.0
    top = float(np.percentile(finite, q)) if finite.size >= 1000 else float(finite.max())
    return top if top > 0 else float(finite.max()) or 1.0


def window_heatmap(values, mask, tokens, q0: int, k0: int, *, title: str = "",
                   present: bool = False) -> go.Figure:
    """An exact [q, k] window of a pattern whose first row is query q0 and first column key k0."""
    v = np.asarray(values, dtype=np.float32)
    fig = matrix_heatmap(v, tokens, tokens, mask=mask, kind="pattern", title=title, present=present,
                         q_offset=q0, k_offset=k0, max_side=max(v.shape))
    tr = fig.data[0]
    if tr.type == "heatmap":  # float32 precision instead of 4 decimals: a weight at T = 4,096 is often ~1e-4
        tr.hovertemplate = ("query %{y} → key %{x}<br>" + ("%{text}<br>" if tr.text is not None else "")
                            + "weight %{z:.7g}<extra></extra>")
    return fig


def payload_bytes(*figs) -> int:
    """What the figures cost on the websocket: the length of their Plotly JSON (what st.plotly_chart sends)."""
    return sum(len(pio.to_json(f, validate=False)) for f in figs)
