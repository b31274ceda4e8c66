"""Every layer × head of a stack [L, H, q, k] as ONE heatmap with NaN gutters between the heads — not a
subplot per head — on categorical axes that name layer, head and token, so hover needs no per-cell data."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.analysis.attention.pooling import pool_matrix
from attnlab.app.figures.matrix import block_labels
from attnlab.app.figures.style import DIVERGING, THEME_SCALE, head_names, layout, tick_labels

MOSAIC_CELLS = 150_000  # cells in the all-heads mosaic before each head is pooled


def mosaic(stack, q_tokens, k_tokens, *, mask=None, kind: str = "pattern", title: str = "", present: bool = False,
           pool: str = "max", layer_labels=None, max_cells: int = MOSAIC_CELLS, kv_group: int = 1) -> go.Figure:
    """Every layer × head of `stack` [L, H, q, k] as ONE heatmap with NaN gutters between heads.

    Rows are layers, columns heads. Axes are categorical with a unique name per row/column
    ("L1 · 7 cat"), so hover shows layer, head, query and key token without per-cell data; tick
    labels name the heads and layers. Heads are pooled when the whole mosaic exceeds `max_cells`.
    `kv_group` > 1 (grouped-query attention): each run of that many heads shares one k/v head; the runs are
    set apart by a wider gutter and the head labels name their k/v head.
    """
    a = np.array(stack, dtype=np.float32)  # [L, H, q, k]
    n_layers, n_heads, nq, nk = a.shape
    if mask is not None:
        a = np.where(np.asarray(mask, bool), a, np.nan)
    a = np.where(np.isfinite(a), a, np.nan)
    qe, ke = np.arange(nq + 1), np.arange(nk + 1)
    pooled = n_layers * n_heads * nq * nk > max_cells
    if pooled:
        side = max(2, int(np.sqrt(max_cells / (n_layers * n_heads))))
        a, qe, ke = pool_matrix(a, side, pool)  # [L, H, pq, pk], pq and pk ≤ side; block edges [pq + 1], [pk + 1]
        title = f"{title} — pooled ({pool} over {qe[1] - qe[0]}-token blocks)"
    pq, pk = a.shape[-2:]
    gap = 1 if max(pq, pk) <= 24 else max(1, round(max(pq, pk) / 24))
    after = [0 if h == n_heads - 1 else 3 * gap if kv_group > 1 and (h + 1) % kv_group == 0 else gap
             for h in range(n_heads)]  # gutter after each head: wider between k/v groups
    starts = np.concatenate([[0], np.cumsum([pk + g for g in after])[:-1]]).astype(int)  # first column of each head
    rows, cols = n_layers * (pq + gap) - gap, int(starts[-1]) + pk
    z = np.full((rows, cols), np.nan, dtype=np.float32)  # [L·(pq + gap) − gap, cols]: NaN gutters
    for layer in range(n_layers):
        for h in range(n_heads):
            r0, c0 = layer * (pq + gap), starts[h]
            z[r0:r0 + pq, c0:c0 + pk] = a[layer, h]
    limit = 10
    qlab = block_labels(list(q_tokens), qe, limit) if pooled else tick_labels(q_tokens, limit)
    klab = block_labels(list(k_tokens), ke, limit) if pooled else tick_labels(k_tokens, limit)
    layer_labels = list(layer_labels) if layer_labels is not None else [f"L{i}" for i in range(n_layers)]
    y, x = [], []
    for layer in range(n_layers):
        y += [f"{layer_labels[layer]} · {i} {qlab[i]}" for i in range(pq)]
        if layer < n_layers - 1:
            y += [f"gap {layer}.{g}" for g in range(gap)]
    for h in range(n_heads):
        x += [f"H{h} · {j} {klab[j]}" for j in range(pk)]
        x += [f"gap {h}.{g}" for g in range(after[h])]
    finite = z[np.isfinite(z)]
    if kind == "pattern":
        scale, zmin, zmax = THEME_SCALE, 0.0, float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    else:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        scale, zmin, zmax = DIVERGING, -lim, lim
    vname = {"pattern": "weight", "scores": "score", "diff": "Δ"}.get(kind, "value")
    trace = go.Heatmap(z=z, x=x, y=y, colorscale=scale, zmin=zmin, zmax=zmax, hoverongaps=False,
                       colorbar={"title": {"text": vname}, "thickness": 14},
                       hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{vname} %{{z:.4f}}<extra></extra>")
    names = head_names(n_heads, kv_group)
    xaxis = {"type": "category", "tickmode": "array", "tickvals": [x[starts[h] + pk // 2] for h in range(n_heads)],
             "ticktext": names, "showgrid": False, "side": "bottom"}
    yaxis = {"type": "category", "tickmode": "array", "autorange": "reversed",
             "tickvals": [y[layer * (pq + gap) + pq // 2] for layer in range(n_layers)],
             "ticktext": [str(s) for s in layer_labels], "showgrid": False}
    cell = max(3, min(14, int(700 / max(rows, 1) * 1.0)))
    fig = go.Figure([trace], layout(title, present, int(min(1000, max(420, rows * cell + 160))), xaxis=xaxis,
                                    yaxis=yaxis, plot_bgcolor="rgba(0,0,0,0)",
                                    meta={"pooled": bool(pooled), "shape": [rows, cols], "heads": n_heads,
                                          "layers": n_layers, "cell": [pq, pk], "gap": gap, "kv_group": kv_group}))
    return fig
