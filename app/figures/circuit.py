"""The circuit page's figures: the circuit graph (nodes laid out by layer, edges' width and colour by score) and
the faithfulness curve (the share of the logit difference kept against the number of edges kept)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import apply_layout, esc

SUPPORTS, OPPOSES = "#1f77b4", "#d62728"  # score < 0: corrupting the edge lowers the logit difference
WIDTHS = (1.5, 3.0, 5.0, 8.0)  # px, by |score| over the largest |score| in quarters
IN_DY = -0.3  # a receiver (q, k, v, MLP input) sits just under its node
IN_DX = {"q": -0.25, "k": 0.0, "v": 0.25}
MAX_DRAWN = 120  # edges drawn at most: the top ones of a larger circuit


def node_xy(graph, name: str) -> tuple[float, float]:
    """Where a sender or receiver is drawn: x the head (the MLP right of the heads), y 0 for embed, L + 1 for
    layer L, n_layers + 1 for logits."""
    H, mid = graph.n_heads, (graph.n_heads - 1) / 2
    if name == "embed":
        return mid, 0.0
    if name == "logits":
        return mid, graph.n_layers + 1.0
    parts = name.split(".")  # blocks.L.attn.head.H[.q] | blocks.L.attn.kv_head.G.k | blocks.L.mlp[.in]
    y = int(parts[1]) + 1.0
    if parts[2] == "mlp":
        return float(H), y + (IN_DY if len(parts) == 4 else 0.0)
    x = float(parts[4]) if parts[3] == "head" else int(parts[4]) * graph.group + (graph.group - 1) / 2
    return (x + IN_DX[parts[5]], y + IN_DY) if len(parts) == 6 else (x, y)


def _owners(graph, receiver: str) -> list[str]:
    """The nodes a receiver belongs to: its head (every query head of a k/v group), its MLP, or logits."""
    parts = receiver.split(".")
    if receiver == "logits" or parts[2] == "mlp":
        return [receiver.removesuffix(".in")]
    if parts[3] == "head":
        return [".".join(parts[:5])]
    g = int(parts[4]) * graph.group
    return [f"blocks.{parts[1]}.attn.head.{h}" for h in range(g, g + graph.group)]


def _label(name: str, roles: dict[str, list[str]]) -> str:
    parts = name.split(".")
    short = "embed" if name == "embed" else "logits" if name == "logits" else \
        f"MLP {parts[1]}" if parts[2] == "mlp" else f"{parts[1]}.{parts[4]}"
    return esc(short + (" · " + roles[name][0] if roles.get(name) else ""), 24)  # every role is in the hover


def circuit_graph(circuit, roles: dict[str, list[str]] | None = None, *, title: str = "",
                  present: bool = False, max_edges: int = MAX_DRAWN) -> go.Figure:
    """The circuit's top edges (circuit.edges(n), n at most `max_edges`) over every sender of the model; heads
    named by `roles`."""
    g, roles = circuit.graph, roles or {}
    edges = circuit.edges(min(circuit.n_edges, max_edges))
    fig = go.Figure()
    top = max((abs(e["score"]) for e in edges), default=1.0) or 1.0
    for sign, colour, what in ((-1, SUPPORTS, "supports the answer"), (1, OPPOSES, "works against it")):
        for k, width in enumerate(WIDTHS):
            xs, ys = [], []
            for e in edges:
                q = min(int(4 * abs(e["score"]) / top), 3)
                if q == k and np.sign(e["score"]) == sign:
                    (x0, y0), (x1, y1) = node_xy(g, e["from"]), node_xy(g, e["to"])
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
            if xs:
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": colour, "width": width},
                                         hoverinfo="skip", name=what, legendgroup=what, showlegend=k == 0))
    mids = [tuple(np.add(node_xy(g, e["from"]), node_xy(g, e["to"])) / 2) for e in edges]
    fig.add_trace(go.Scatter(
        x=[m[0] for m in mids], y=[m[1] for m in mids], mode="markers", name="edges", showlegend=False,
        marker={"size": 5, "opacity": 0.5, "color": [SUPPORTS if e["score"] < 0 else OPPOSES for e in edges]},
        customdata=[[e["from"], e["to"], e["score"]] for e in edges],
        hovertext=[f"{esc(e['from'], 40)} → {esc(e['to'], 40)}" for e in edges],
        hovertemplate="%{hovertext}<br>score %{customdata[2]:+.4f}<extra></extra>"))
    used = {n for e in edges for n in (e["from"], *_owners(g, e["to"]))}
    nodes = g.senders + ["logits"]
    xy = [node_xy(g, n) for n in nodes]
    fig.add_trace(go.Scatter(
        x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers+text", name="nodes", showlegend=False,
        text=[_label(n, roles) if n in used or n in ("embed", "logits") else "" for n in nodes],
        textposition=["bottom center" if i % 2 else "top center" for i in range(len(nodes))],
        customdata=nodes, hovertext=[", ".join([n, *roles.get(n, [])]) for n in nodes],
        marker={"size": [14 if n in used else 6 for n in nodes],
                "color": ["#ff7f0e" if roles.get(n) else "#444" if n in used else "#bbb" for n in nodes]},
        hovertemplate="%{hovertext}<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=list(range(g.n_heads + 1)),
                     ticktext=[f"head {h}" for h in range(g.n_heads)] + ["MLP"], range=[-0.8, g.n_heads + 0.8])
    fig.update_yaxes(tickmode="array", tickvals=list(range(g.n_layers + 2)),
                     ticktext=["embed", *(f"layer {L}" for L in range(g.n_layers)), "logits"])
    return apply_layout(fig, title, present, max(420, min(1400, 110 * (g.n_layers + 2))), showlegend=True)


def faithfulness_curve(curve: list[tuple[int, float]], chosen: int | None = None, *, title: str = "",
                       present: bool = False) -> go.Figure:
    """Faithfulness (% of the logit difference kept) of the top-n circuit for each n of `curve`; the x axis counts
    the points, its ticks say n."""
    n = [c[0] for c in curve]
    fig = go.Figure(go.Scatter(x=np.arange(len(curve)), y=[100 * c[1] for c in curve], mode="lines+markers",
                               customdata=n, name="kept", line={"width": 3},
                               hovertemplate="%{customdata} edges: %{y:.1f} %<extra></extra>"))
    if chosen is not None and chosen in n:
        i = n.index(chosen)
        fig.add_trace(go.Scatter(x=[i], y=[100 * curve[i][1]], mode="markers", name="this circuit",
                                 marker={"size": 14, "symbol": "diamond"}, customdata=[chosen],
                                 hovertemplate="%{customdata} edges: %{y:.1f} %<extra></extra>"))
    fig.add_hline(y=100, line_dash="dot")
    fig.update_xaxes(tickmode="array", tickvals=np.arange(len(curve)), ticktext=[f"{k:,}" for k in n],
                     title="edges kept (top by |score|)")
    fig.update_yaxes(title="logit difference kept (%)")
    return apply_layout(fig, title, present, 340)
