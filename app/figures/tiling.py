"""Flash attention's tiling (analysis.machinery.flash_tiling): the grid of tiles with the one being computed, and the
running maximum and sum of one query row as the key/value blocks arrive."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import apply_layout, font_size
from plotly.subplots import make_subplots

STATES = ("skipped: every cell masked", "not yet", "done", "this tile")
COLORS = ("#d9d9d9", "#ffffff", "#9ecae1", "#e6550d")


def tile_grid(tiling, q_block: int, step: int, present: bool = False) -> go.Figure:
    """Query blocks × key blocks, coloured by state, for query block `q_block` at its tile `step` (0-based);
    other query blocks are done before it and not yet after it, as the kernel walks them one by one."""
    bq, bk = tiling.block_q, tiling.block_k
    nq, nk = -(-tiling.T // bq), -(-tiling.S // bk)
    state = np.ones((nq, nk), dtype=int)  # [nq, nk] 1 = not yet
    state[:q_block] = 2
    mine = tiling.steps_of(q_block)
    for i, s in enumerate(mine):
        state[q_block, s.cols[0] // bk] = 3 if i == step else 2 if i < step else 1
    for rows, cols in tiling.skipped:
        state[rows[0] // bq, cols[0] // bk] = 0
    scale = [[v, c] for i, c in enumerate(COLORS) for v in (i / len(COLORS), (i + 1) / len(COLORS))]
    gap = 2 if max(nq, nk) <= 32 else 0  # 64 tiles across leave no colour between 2-pixel gaps
    fig = go.Figure(go.Heatmap(z=state, zmin=-0.5, zmax=3.5, colorscale=scale, xgap=gap, ygap=gap,
                               customdata=np.array(STATES, dtype=object)[state], showscale=False,
                               hovertemplate="query block %{y}, key block %{x}: %{customdata}<extra></extra>"))
    ticks = dict(tickmode="array", ticklabeloverflow="allow", automargin=False)
    fig.update_xaxes(title_text=f"key/value block ({bk} keys each)", tickvals=list(range(nk)),
                     ticktext=[f"{c * bk}–{min((c + 1) * bk, tiling.S) - 1}" for c in range(nk)], **ticks)
    fig.update_yaxes(title_text=f"query block ({bq} rows each)", tickvals=list(range(nq)), autorange="reversed",
                     ticktext=[f"{r * bq}–{min((r + 1) * bq, tiling.T) - 1}" for r in range(nq)], **ticks)
    for name, color in zip(STATES, COLORS):  # a legend of the four states
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True,
                                 marker=dict(size=12, symbol="square", color=color, line=dict(color="#888", width=1))))
    apply_layout(fig, "The tiles: one is in fast memory at a time", present, height=450 + 40 * present,
                 legend=dict(orientation="h", y=-0.3, yanchor="top", x=0, font=dict(size=font_size(present))))
    fig.update_layout(margin=dict(l=90, r=10, t=60, b=150), plot_bgcolor="rgba(0,0,0,0)")
    return fig


def running_stats(tiling, q_block: int, row: int, step: int, present: bool = False) -> go.Figure:
    """The running max m and sum l of query row `row` (absolute) after each tile of its block; the tile
    `step` marked."""
    mine = tiling.steps_of(q_block)
    i = row - q_block * tiling.block_q
    x = list(range(1, len(mine) + 1))
    m = [float(s.m_after[i]) for s in mine]
    lsum = [float(s.l_after[i]) for s in mine]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("running max m", "running sum l = Σ exp(score − m)"),
                        horizontal_spacing=0.14)
    for col, ys in ((1, m), (2, lsum)):
        fig.add_trace(go.Scatter(x=x, y=[y if np.isfinite(y) else None for y in ys], mode="lines+markers",
                                 showlegend=False, line=dict(color="#1f77b4")), row=1, col=col)
        if step < len(ys) and np.isfinite(ys[step]):
            fig.add_trace(go.Scatter(x=[step + 1], y=[ys[step]], mode="markers", showlegend=False,
                                     marker=dict(size=14, color="#e6550d")), row=1, col=col)
    fig.update_xaxes(title_text="tiles arrived", tickmode="array", tickvals=x, ticklabeloverflow="allow")
    apply_layout(fig, f"Row {row}: what the kernel keeps instead of a row of weights", present, height=340, top=90)
    fig.update_layout(margin=dict(l=60, r=20, t=100, b=60))
    return fig
