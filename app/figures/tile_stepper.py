"""Flash attention's tiles for one query row, as a stepper (analysis.machinery.flash_tiling): the running max m and running
sum l after each key/value tile, and the partial output acc / l after each tile (d_head-wide strips) above the
model's own eager output; a slider walks the tiles in the browser (and in the handout), the last tile shown first."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import DIVERGING, apply_layout, font_size, wrap
from plotly.subplots import make_subplots

MARK = "#ff7f0e"


def tile_rows(tiling, q_block: int, row: int) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """(the tiles of `q_block`, m [n], l [n] and the partial output [n, d] of absolute row `row` after each)."""
    mine = tiling.steps_of(q_block)
    i = row - q_block * tiling.block_q
    m = np.array([s.m_after[i] for s in mine])  # [n]
    lsum = np.array([s.l_after[i] for s in mine])  # [n]
    out = np.stack([s.out_after[i] for s in mine])  # [n, d]
    return mine, m, lsum, out


def _shown(out: np.ndarray, z: np.ndarray, t: int) -> np.ndarray:
    """The strips at step t (0-based): partial outputs after tiles 0..t, later ones blank, then eager's z."""
    rows = np.where(np.arange(len(out))[:, None] <= t, out, np.nan)  # [n, d]
    return np.vstack([rows, z[None, :]])  # [n + 1, d]


def tile_stepper(tiling, z, q_block: int, row: int, *, title: str = "", present: bool = False,
                 height: int = 460) -> go.Figure:
    """m and l of `row` after each tile (top), the partial outputs and the eager output `z` [d_head] (bottom), a
    slider over the tiles (active: the last)."""
    mine, m, lsum, out = tile_rows(tiling, q_block, row)
    n, d = out.shape
    x = np.arange(1, n + 1)
    names = [f"keys {s.cols[0]}–{s.cols[1] - 1}" for s in mine] + ["eager z"]
    fig = make_subplots(rows=2, cols=2, row_heights=[0.36, 0.64], vertical_spacing=0.16, horizontal_spacing=0.16,
                        specs=[[{}, {}], [{"colspan": 2}, None]],
                        subplot_titles=("running max m, by tile", "running sum l, by tile"))
    for col, ys in ((1, m), (2, lsum)):
        fig.add_trace(go.Scatter(x=x, y=[v if np.isfinite(v) else None for v in ys], mode="lines+markers",
                                 showlegend=False, line={"color": "#1f77b4"}, name=("m", "l")[col - 1],
                                 hovertemplate="after tile %{x}: %{y:.4f}<extra></extra>"), row=1, col=col)
    for col, ys in ((1, m), (2, lsum)):  # traces 2 and 3: the current tile (the slider moves them)
        fig.add_trace(go.Scatter(x=[n], y=[float(ys[-1])], mode="markers", showlegend=False, name="tour-look",
                                 marker={"size": 13, "color": MARK}, hoverinfo="skip"), row=1, col=col)
    lim = float(max(np.abs(out).max(), np.abs(z).max())) or 1.0
    fig.add_trace(go.Heatmap(z=_shown(out, z, n - 1), x=np.arange(d), y=np.arange(n + 1), zmin=-lim, zmax=lim,
                             colorscale=DIVERGING, showscale=False, ygap=1, name="partial output",
                             customdata=np.array([[f"{r} · dim {c}" for c in range(d)] for r in names], dtype=object),
                             hovertemplate="%{customdata}<br>%{z:.4f}<extra></extra>"), row=2, col=1)
    size = font_size(present)
    fig.update_xaxes(tickmode="array", tickvals=list(x), ticklabeloverflow="allow", row=1)
    fig.update_xaxes(title={"text": "partial output acc / l after each tile: dimension", "standoff": 2},
                     tickmode="array", tickvals=list(range(0, d, 8)), row=2, col=1)
    fig.update_yaxes(tickmode="array", tickvals=list(range(n + 1)), ticktext=names, autorange="reversed",
                     tickfont={"size": size - 3}, showgrid=False, row=2, col=1)
    fig.update_yaxes(nticks=4, row=1)
    for a in fig.layout.annotations:
        a.font = {"size": size}
    steps = [{"method": "update", "label": str(t + 1),  # traces 2, 3 (the marks) and 4 (the strips) at tile t
              "args": [{"x": [[t + 1], [t + 1], list(range(d))],
                        "y": [[_fin(m[t])], [_fin(lsum[t])], list(range(n + 1))],
                        "z": [None, None, _shown(out, z, t)]}, {"shapes": [_frame(t, d)]}, [2, 3, 4]]}
             for t in range(n)]
    apply_layout(fig, wrap(title, 500, present), present, height, top=80 if title else 50)
    fig.update_layout(shapes=[_frame(n - 1, d)], margin={"l": 90, "r": 16, "b": 96}, plot_bgcolor="rgba(0,0,0,0)",
                      sliders=[{"active": n - 1, "steps": steps, "currentvalue": {"prefix": "tile ", "font":
                                {"size": size - 2}}, "pad": {"t": 44, "b": 0}, "len": 1.0, "x": 0,
                                "font": {"size": size - 4}, "y": 0, "yanchor": "top"}],
                      meta={"row": int(row), "q_block": int(q_block), "tiles": n})
    return fig


def _fin(v) -> float | None:
    """A running max or sum as a plotted value (−inf, no visible key yet: no point)."""
    return float(v) if np.isfinite(v) else None


def _frame(t: int, d: int) -> dict:
    """The outline of tile t's partial-output strip."""
    return {"type": "rect", "xref": "x3", "yref": "y3", "x0": -0.5, "x1": d - 0.5, "y0": t - 0.5, "y1": t + 0.5,
            "line": {"color": MARK, "width": 2}, "fillcolor": "rgba(0,0,0,0)", "name": "tour-look"}
