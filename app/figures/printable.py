"""A figure that stands on its own outside Streamlit (a handout, a PNG, an SVG): Streamlit's theme template holds
placeholder colours (`#000011`…) that only its front end replaces, and its front end also grows the margins to fit
the tick labels. `printable` gives a copy its own colours (Streamlit's light theme, written out) and margins."""

from __future__ import annotations

import copy
import re

import plotly.graph_objects as go
import plotly.io as pio

# Streamlit's light theme, as its front end fills the placeholders in (streamlit_plotly_theme.py names them).
SEQUENTIAL = ["#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff", "#3d9df3", "#1c83e1", "#0068c9", "#0054a3",
              "#004280"]
CATEGORICAL = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1", "#ff8700", "#ffd16a", "#6d3fc0",
               "#d5dae5"]
PLACEHOLDER = re.compile(r"#0000(?:0[1-9]|[1-3][0-9]|40)\b", re.I)  # Streamlit's stand-in colours #000001…#000040
MIN_MARGIN = {"l": 16, "r": 16, "t": 20, "b": 16}  # px: room for a tick label's overhang at the plot's corners


def _scale(colours: list[str]) -> list[list]:
    return [[i / (len(colours) - 1), c] for i, c in enumerate(colours)]


def template() -> go.layout.Template:
    """Plotly's white template with Streamlit's light colours: sequential blue, its colour cycle."""
    t = copy.deepcopy(pio.templates["plotly_white"])
    t.layout.colorscale.sequential = _scale(SEQUENTIAL)
    t.layout.colorscale.sequentialminus = _scale(SEQUENTIAL)
    t.layout.colorway = CATEGORICAL
    t.data.heatmap = [go.Heatmap(colorscale=_scale(SEQUENTIAL))]
    return t


def printable(fig: go.Figure, width: int | None = None, height: int | None = None) -> go.Figure:
    """A copy of `fig` with every colour written out, axes that make room for their labels (automargin) and,
    when given, a fixed size in px."""
    out = go.Figure(fig)
    out.update_layout(template=template())
    for tr in out.data:  # a trace left on the theme's scale gets the scale itself
        if "colorscale" in tr and tr.colorscale is None and getattr(tr, "coloraxis", None) is None:
            tr.colorscale = _scale(SEQUENTIAL)
    for ax in [*out.select_xaxes(), *out.select_yaxes()]:
        ax.automargin = True
    m = out.layout.margin
    out.update_layout(margin={k: max(getattr(m, k) or 0, v) for k, v in MIN_MARGIN.items()},
                      title_automargin=False, paper_bgcolor="white")
    if width:
        out.update_layout(width=width)
    if height:
        out.update_layout(height=height)
    return out


def placeholders(fig: go.Figure) -> list[str]:
    """Streamlit placeholder colours left in `fig`'s JSON (a figure that prints has none)."""
    return sorted(set(PLACEHOLDER.findall(pio.to_json(fig, validate=False))))
