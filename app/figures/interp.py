"""Charts of the logit lens, direct logit attribution and activation patching: grids of layers against positions
or heads, every axis integer with escaped token labels."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import DIVERGING, MASKED_BG, THEME_SCALE, apply_layout, esc, font_size


def _axes(fig: go.Figure, rows, cols, top: bool = True) -> None:
    x, y = np.arange(len(cols)), np.arange(len(rows))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[esc(c, 14) for c in cols], side="top" if top else "bottom",
                     showgrid=False, zeroline=False)
    fig.update_yaxes(tickmode="array", tickvals=y, ticktext=[esc(r, 20) for r in rows], autorange="reversed",
                     showgrid=False, zeroline=False)


def _height(n_rows: int, present: bool) -> int:
    return int(160 + n_rows * (30 if present else 24))


def lens_grid(top_tokens, top_probs, rows, tokens, *, title: str = "", present: bool = False) -> go.Figure:
    """Rows (the stream after each layer) × positions: the top-1 token printed, shaded by its probability; the
    hover lists the top-k."""
    p1 = np.asarray(top_probs, dtype=np.float64)[:, :, 0]  # [R, T]
    text = [[esc(top_tokens[r][q][0], 10) for q in range(len(tokens))] for r in range(len(rows))]
    hover = [["<br>".join(f"{esc(t, 20)} {p:.3f}" for t, p in zip(top_tokens[r][q], top_probs[r][q]))
              for q in range(len(tokens))] for r in range(len(rows))]
    fig = go.Figure(go.Heatmap(z=p1, x=np.arange(len(tokens)), y=np.arange(len(rows)), text=text, customdata=hover,
                               texttemplate="%{text}", textfont={"size": font_size(present) - 2}, zmin=0, zmax=1,
                               colorscale=THEME_SCALE, colorbar={"title": {"text": "p(top-1)"}, "thickness": 14},
                               xgap=1, ygap=1,
                               hovertemplate="%{y} · position %{x}<br>%{customdata}<extra></extra>"))
    _axes(fig, rows, tokens)
    return apply_layout(fig, title, present, _height(len(rows), present), top=110 if title else 60)


def value_grid(z, rows, cols, *, title: str = "", present: bool = False, name: str = "restored",
               percent: bool = True, zlim: float | None = None) -> go.Figure:
    """A diverging grid (blue negative, red positive) with its values printed: a restored share in percent or a
    logit contribution."""
    z = np.asarray(z, dtype=np.float64)
    shown = 100 * z if percent else z
    lim = zlim or max(float(np.abs(shown).max()) if shown.size else 1.0, 1e-9)
    fmt = ".0f" if percent else ".2f"
    fig = go.Figure(go.Heatmap(z=shown, x=np.arange(len(cols)), y=np.arange(len(rows)), zmin=-lim, zmax=lim,
                               colorscale=DIVERGING, texttemplate=f"%{{z:{fmt}}}", xgap=1, ygap=1,
                               textfont={"size": font_size(present) - 3}, hoverongaps=False,
                               colorbar={"title": {"text": f"{name} (%)" if percent else name}, "thickness": 14},
                               hovertemplate=f"%{{y}} · %{{x}}<br>{name} %{{z:.2f}}<extra></extra>"))
    _axes(fig, rows, cols)
    return apply_layout(fig, title, present, _height(len(rows), present), top=110 if title else 60,
                        plot_bgcolor=MASKED_BG)


def answer_curve(rows, probs, *, title: str = "", present: bool = False, name: str = "p(answer)") -> go.Figure:
    """The answer's probability at the last position after each layer."""
    fig = go.Figure(go.Scatter(x=np.arange(len(rows)), y=np.asarray(probs, dtype=np.float64), mode="lines+markers",
                               name=name, line={"width": 3}))
    fig.update_xaxes(tickmode="array", tickvals=np.arange(len(rows)), ticktext=[esc(r) for r in rows],
                     title="the residual stream after")
    fig.update_yaxes(title=name, range=[0, 1.02])
    return apply_layout(fig, title, present, 320)
