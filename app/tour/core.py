"""What a tour step is: the topic, the page that shows it in full (with the URL state that opens the same view
there), and a builder that runs the step's model and returns the view: one figure, the narrative written from
its numbers, and the numbers themselves. Plus the marks that point at the one thing to look at."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

import plotly.graph_objects as go
from attnlab.app.figures.fit import fit_bars, fit_ticks
from attnlab.app.figures.style import esc, md

MARK = "#ff7f0e"  # the highlight: the same orange as the query-row outline on every page
HEIGHT = {False: 400, True: 460}  # the figure fits a 1024×768 projector beside its narrative
WIDTH = 540  # px: the figure's column beside the narrative, at 1024×768 presenting and at 1400 px (and its floor)


@dataclass(frozen=True)
class View:
    """One step as the model shows it now: the figure, 2–3 sentences built from `numbers`, and the numbers."""
    fig: go.Figure
    narrative: str
    numbers: dict
    look: str  # what the highlight on the figure points at
    params: dict  # the URL state that opens the same view on the step's page


@dataclass(frozen=True)
class Step:
    """A lecture topic: its title, the page (URL path) that shows it in full, and its builder."""
    topic: int
    title: str
    page: str
    build: Callable[[bool], View] = field(repr=False)

    def link(self, view: View, present: bool = False) -> str:
        """The relative URL of the same view on its own page (a fresh session there reads the URL)."""
        return self.link_of(view.params, present)

    def link_of(self, params: dict, present: bool = False) -> str:
        """The relative URL of this step's page at the URL state `params`."""
        q = {k: str(v) for k, v in params.items()} | ({"present": "1"} if present else {})
        return f"/{self.page}?{urlencode(q)}"


def fit(fig: go.Figure, present: bool) -> go.Figure:
    """The figure at the tour's height (it must fit the projector beside the narrative), its tick labels thinned
    to what the column's width holds, its colour bars next to the plot (as the page draws it, so the handout too)."""
    fig.update_layout(height=HEIGHT[present])
    fit_bars(fit_ticks(fig, WIDTH))
    fig.layout.height = HEIGHT[present]  # the projector's height wins over labels' room above: the plot gives way
    return fig


def box(fig: go.Figure, x0: float, x1: float, y0: float, y1: float, label: str = "", *, xref: str = "x",
        yref: str = "y", dash: str = "solid") -> go.Figure:
    """An orange box around data cells [x0, x1] × [y0, y1] (cell centres; the box takes half a cell around),
    labelled above its top edge."""
    fig.add_shape(type="rect", xref=xref, yref=yref, x0=x0 - 0.5, x1=x1 + 0.5, y0=y0 - 0.5, y1=y1 + 0.5,
                  line={"color": MARK, "width": 4, "dash": dash}, fillcolor="rgba(0,0,0,0)", name="tour-look")
    if label:
        fig.add_annotation(x=(x0 + x1) / 2, y=y0 - 0.5, xref=xref, yref=yref, text=esc(label, 60), showarrow=False,
                           yanchor="bottom", font={"color": MARK, "size": 15}, bgcolor="rgba(255,255,255,0.85)",
                           name="tour-look")
    return fig


def note(fig: go.Figure, x: float, y: float, label: str, *, xref: str = "x", yref: str = "y", ax: int = 40,
         ay: int = -40) -> go.Figure:
    """An orange arrow with a label pointing at (x, y); the label sits (ax, ay) px from the point (move it off
    what the narrative quotes)."""
    fig.add_annotation(x=x, y=y, xref=xref, yref=yref, text=esc(label, 60), showarrow=True, arrowcolor=MARK,
                       arrowwidth=3, arrowhead=2, ax=ax, ay=ay, font={"color": MARK, "size": 15},
                       bgcolor="rgba(255,255,255,0.85)", name="tour-look",
                       xanchor="right" if ax < 0 else "auto")
    return fig


def num(x: float) -> str:
    """A small quantity as the narrative writes it: two significant digits in scientific notation (1.9e-04)."""
    return f"{float(x):.1e}"


def pct(x: float) -> str:
    """A share as the narrative writes it (e.g. 83%)."""
    return f"{100 * float(x):.0f}%"


def tok(t: str) -> str:
    """A token inside the narrative's Markdown, shown as typed."""
    return md(t)
