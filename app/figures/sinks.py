"""The Sinks page's figures: each head's share on the first token (sink heads ringed), the first token's norms against
the others' per layer, and the window test's perplexities as bars."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.lines import lines
from attnlab.app.figures.style import apply_layout, head_names

RING = "#ff7f0e"  # the orange that marks the one thing to look at on every page

NORM_NAMES = {"key": "‖k‖ key", "value": "‖v‖ value", "out": "‖α·v‖ head output", "resid": "‖x‖ residual stream"}
PPL_BARS = (("full", "full attention", "#2ca02c"), ("with_sinks", "window + sinks", "#1f77b4"),
            ("with_sinks_cache_positions", "window + sinks (cache positions)", "#9467bd"),
            ("without_sinks", "window alone", "#d62728"))


def share_grid(share, threshold: float, *, kv_group: int = 1, present: bool = False, title: str = "",
               compact: bool = False) -> go.Figure:
    """Layers × heads of the share on the first token; a ring on every head whose share is ≥ threshold. `compact`
    (a small figure: the tour's column) leaves the values out of the cells and draws small rings."""
    share = np.asarray(share, dtype=np.float64)  # [L, H]
    fig = grid_heatmap(share, [f"layer {i}" for i in range(share.shape[0])], head_names(share.shape[1], kv_group),
                       diverging=False, present=present, value_name="share", kv_group=kv_group, title=title)
    fig.data[0].update(zmin=0.0, zmax=1.0)
    if compact:
        fig.data[0].update(texttemplate="")
    rows, cols = np.nonzero(share >= threshold)
    fig.add_trace(go.Scatter(x=cols, y=rows, mode="markers", name=f"sink head (≥ {threshold})",
                             marker={"symbol": "circle-open", "size": 7 if compact else 22, "color": RING,
                                     "line": {"width": 1.5 if compact else 3}},
                             hovertemplate="layer %{y} · head %{x}: sink head<extra></extra>"))
    fig.update_xaxes(range=[-0.5, share.shape[1] - 0.5])  # the rings must not pad the grid's axes
    fig.update_yaxes(range=[share.shape[0] - 0.5, -0.5], autorange=False)
    return fig


def norm_lines(norms: dict, which: str, *, present: bool = False, title: str = "") -> go.Figure:
    """One norm per layer: the first token against the mean of the others (`which` a key of NORM_NAMES)."""
    first, rest = np.asarray(norms[f"{which}_first"]), np.asarray(norms[f"{which}_rest"])  # [L], [L]
    fig = lines(np.arange(len(first)), {"first token": first, "other tokens (mean)": rest}, title=title,
                xlabel="layer", ylabel=NORM_NAMES[which], present=present)
    fig.update_xaxes(tickmode="array", tickvals=np.arange(len(first)))
    if which == "resid":  # the first token can be 100× the others (massive activations): a log axis shows both
        fig.update_yaxes(type="log")
    return fig


def ppl_bars(ppl: dict, *, present: bool = False, title: str = "") -> go.Figure:
    """The window test's perplexities (a WindowPPL as JSON): one bar per run it made."""
    kept = [(k, name, c) for k, name, c in PPL_BARS if ppl.get(k) is not None]
    x = np.arange(len(kept))
    y = np.array([ppl[k] for k, _, _ in kept], dtype=np.float64)
    fig = go.Figure(go.Bar(x=x, y=y, marker_color=[c for _, _, c in kept], text=[f"{v:.2f}" for v in y],
                           textposition="outside", hovertemplate="%{customdata}: perplexity %{y:.3f}<extra></extra>",
                           customdata=[name for _, name, _ in kept]))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[name for _, name, _ in kept])
    fig.update_yaxes(title="perplexity", range=[0, 1.15 * float(y.max())])
    return apply_layout(fig, title, present, 380)
