"""A lecturer's step: the page at its URL state, run headless (Streamlit's AppTest) to take the first figure it
draws, with the lecturer's title and words. The page computes the figure, so it is the view the link opens."""

from __future__ import annotations

import base64
import json

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.fit import fit_width
from attnlab.app.navigation import PAGES
from attnlab.app.tour.core import HEIGHT, WIDTH, View

from attnlab.data import data_folder

PAGE_PATHS = {u: f for f, _, u, _ in PAGES if u != "tour"}  # URL path -> pages/ file (a tour holds no tour)

RUN_TIMEOUT_S = 180
MAX_HEIGHT = 820  # px: a page's figure on a printed page under its step's heading (A4 and Letter hold ~960 px)


def page_figures(page: str, state: dict, present: bool = False) -> list[dict]:
    """The figures (Plotly JSON) pages/<file> draws when opened at `state` (its URL's query parameters)."""
    import streamlit.logger
    from streamlit.testing.v1 import AppTest

    level = streamlit.logger.get_logger(__name__).level  # AppTest re-reads Streamlit's config, log level included:
    at = AppTest.from_file(str(data_folder("pages") / PAGE_PATHS[page]), default_timeout=RUN_TIMEOUT_S)
    for k, v in (state | ({"present": "1"} if present else {})).items():
        at.query_params[k] = str(v)
    at.run()
    streamlit.logger.set_log_level(level)  # the caller's again (`attnlab handout` keeps its stderr free of warnings)
    if at.exception:
        raise ValueError(f"the page /{page} failed at this state: {at.exception[0].message.splitlines()[0][:200]}")
    if at.error:  # the page refused the state (an unknown model, a bad value): its own message
        raise ValueError(f"the page /{page} at this state says: {' '.join(at.error[0].value.split())[:200]}")
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    if not figs and (said := [*at.warning, *at.info]):  # it stopped before drawing (a model it cannot load…)
        raise ValueError(f"the page /{page} at this state draws nothing: {' '.join(said[0].value.split())[:200]}")
    return figs


def arrays(spec):
    """A figure's JSON with its base64-typed arrays ({"dtype", "bdata", "shape"}: how Plotly sends numpy) as numpy
    arrays again: the fitting code reads tick values and cells as numbers, not as that dict's keys."""
    if isinstance(spec, dict):
        if "bdata" in spec and "dtype" in spec:
            a = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"]))
            shape = spec.get("shape")
            return a.reshape([int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape or -1)
        return {k: arrays(v) for k, v in spec.items()}
    return [arrays(v) for v in spec] if isinstance(spec, list) else spec


def lecturer_view(entry: dict, present: bool = False) -> View:
    """The View of a lecturer's step: the page's first figure, the lecturer's text, the URL state."""
    figs = page_figures(entry["page"], entry.get("state", {}), present)
    if figs:
        fig = go.Figure(arrays(figs[0]))
    else:
        fig = go.Figure().add_annotation(text="This view draws no chart: open it on its page.", showarrow=False,
                                         x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_xaxes(visible=False).update_yaxes(visible=False)
    fit_width(fig, WIDTH)  # at the height the page built it for (fixed margins, rows of panels), not the tour's
    fig.layout.height = min(fig.layout.height or HEIGHT[present], MAX_HEIGHT)  # 400 px: six Masks panels over titles
    return View(fig, entry.get("text", ""), {}, "", dict(entry.get("state", {})))
