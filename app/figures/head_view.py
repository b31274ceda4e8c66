"""The head view (BertViz-style): lines from one query token to every key, one colour per head, line width
and opacity growing with the weight."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import HEAD_COLORS, font_size, layout, tick_labels


def head_view_title(query: int, layer: int, head: int | None) -> str:
    """The head view's title: the query token and the layer, and the head when one head is shown."""
    return f"Head view: token {query} → keys (layer {layer}" + (f", head {head})" if head is not None else ")")


def head_view(patterns, q_tokens, k_tokens, query: int, heads, *, present: bool = False, title: str = "",
              bins: int = 6, min_weight: float = 0.02) -> go.Figure:
    """Lines from query token `query` (left) to every key (right); line opacity and width grow with
    the weight relative to the largest weight of that row. patterns [H, q, k]; one colour per head in
    `heads`. Weights are bucketed into `bins` levels, so each head needs at most `bins` line traces;
    weights below `min_weight` × the row's largest are not drawn. Tokens are labelled every k-th where labels
    would overlap (long texts), the query and the keys it attends to most always."""
    p = np.asarray(patterns, dtype=np.float64)
    nq, nk = p.shape[-2:]
    n = max(nq, nk)
    yq, yk = -np.arange(nq) * (n / max(nq, 1)), -np.arange(nk) * (n / max(nk, 1))
    traces = []
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
            traces.append(go.Scatter(
                x=xs, y=ys, mode="lines", line={"color": color, "width": 1 + 6 * ((lvl + 1) / bins) ** 1.5},
                opacity=0.15 + 0.85 * ((lvl + 1) / bins) ** 2, hoverinfo="skip", legendgroup=f"h{h}",
                name=f"head {h}", showlegend=first))
            first = False
        if first:  # nothing above min_weight: keep a legend entry
            traces.append(go.Scatter(x=[None], y=[None], mode="lines", line={"color": color}, name=f"head {h}"))
    size = font_size(present)
    h_px = int(min(1600, max(360, n * (size + 9) + 120)))
    every = max(1, int(np.ceil((size + 3) / ((h_px - 120) / n))))  # label every k-th token: no overlapping text
    mean_w = p[heads, query].mean(0) if heads else np.zeros(nk)  # [k]: the query's row, mean over the heads shown
    rel = mean_w / mean_w.max() if mean_w.max() > 0 else mean_w
    qs = [i for i in range(nq) if i % every == 0 and i != query]  # the query has its own marked label
    top = {int(j) for j in np.argsort(-mean_w)[:8] if rel[j] >= 0.5}  # the keys the query attends to most
    ks = [j for j in range(nk) if j % every == 0 or j in top]
    qlab, klab = tick_labels(q_tokens, 18), tick_labels(k_tokens, 18)
    traces.append(go.Scatter(
        x=[0.16] * len(qs), y=yq[qs], mode="text", text=[qlab[i] for i in qs], textposition="middle left",
        textfont={"size": size}, showlegend=False, customdata=qs, hovertemplate="query %{customdata}: %{text}<extra></extra>"))
    traces.append(go.Scatter(
        x=[0.16], y=[yq[query]], mode="text+markers", text=[qlab[query]], textposition="middle left",
        marker={"color": "#ff7f0e", "size": 10, "symbol": "circle"}, textfont={"size": size + 1, "color": "#ff7f0e"},
        showlegend=False, hovertemplate=f"query {query}: %{{text}}<extra></extra>"))
    traces.append(go.Scatter(
        x=[0.84] * len(ks), y=yk[ks], mode="text", text=[klab[j] for j in ks], textposition="middle right",
        textfont={"size": size}, showlegend=False, customdata=np.stack([ks, mean_w[ks]], 1),  # [K', 2]
        hovertemplate="key %{customdata[0]}: %{text}<br>mean weight %{customdata[1]:.3f}<extra></extra>"))
    return go.Figure(traces, layout(title, present, h_px, legend={"orientation": "h", "y": 1.02, "x": 0},
                                    xaxis={"visible": False, "range": [-0.25, 1.25]},
                                    yaxis={"visible": False, "range": [-n + 0.3, 1.2]},
                                    meta={"query": int(query), "heads": heads}))
