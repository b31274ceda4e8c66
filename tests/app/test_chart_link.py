"""One head everywhere (app.chart_link), server side: a run started by the head matrix's own buttons moves every
other view to the pressed head and sends the matrix exactly as before (the browser already shows the pressed
head); any other run builds the matrix around the chosen head. The browser half is tests/e2e/test_linked_views."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.app.chart_link import ANCHOR, SWITCHED

from .conftest import ok, open_page, titled

TEXT = "Ada sat on the mat"


def figure(at, key: str) -> str:
    """The JSON the page sends for the chart drawn with frame.chart(key=key)."""
    (el,) = [el for el in at.get("plotly_chart") if el.proto.id.endswith(f"fig-{key}")]
    return el.proto.spec


def pressed(at, chart: str, layer: int, head: int):
    """What the listener's callback does on a press of (layer, head), then the run it starts."""
    at.session_state["layer"], at.session_state["head"] = layer, head
    at.session_state[SWITCHED] = (chart, (layer, head))
    return at.run()


def test_heatmaps_press_moves_the_other_views_and_sends_the_matrix_unchanged():
    at = open_page("heatmaps", model="random-decoder", text=TEXT, layer=1, head=0)
    ok(at)
    before = figure(at, "head")
    assert json.loads(before)["layout"]["meta"]["heads"][0] == [1, 0]
    assert any("the rest of the page" in c.value for c in at.caption)
    pressed(at, "head", 0, 2)
    ok(at)
    assert figure(at, "head") == before  # byte for byte: Streamlit leaves the browser's switch alone
    assert at.session_state[ANCHOR]["head"] == (1, 0)
    assert titled(at, "Head view")["layout"]["title"]["text"].replace("<br>", " ").endswith("(layer 0, head 2)")
    assert any(m.value.startswith("**One score, neuron by neuron** — layer 0, head 2,") for m in at.markdown)
    assert at.query_params["layer"] == "0" and at.query_params["head"] == "2"
    # a choice made above (not a press): the matrix is rebuilt around it, with the captured numbers
    at.session_state["head"] = 3
    at.run()
    ok(at)
    fig = json.loads(figure(at, "head"))
    assert fig["layout"]["meta"]["heads"][0] == [0, 3] and fig["data"][0]["visible"] is True
    assert at.session_state[ANCHOR]["head"] == (0, 3)


def test_a_stale_press_does_not_pin_the_matrix():
    """The press's flag only counts for the head it pressed: a run for another head rebuilds the matrix."""
    at = open_page("heatmaps", model="random-decoder", text=TEXT, layer=1, head=0)
    at.session_state[SWITCHED] = ("head", (0, 1))  # left over: this run is for (1, 2)
    at.session_state["head"] = 2
    at.run()
    ok(at)
    assert json.loads(figure(at, "head"))["layout"]["meta"]["heads"][0] == [1, 2]


def test_score_scales_press_moves_the_tables_and_sends_the_matrix_unchanged():
    at = open_page("scores", model="random-decoder", text=TEXT, layer=0, head=0)
    ok(at)
    before = figure(at, "cf")
    pressed(at, "cf", 1, 3)
    ok(at)
    assert figure(at, "cf") == before
    assert [s.value for s in at.subheader][0] == "Score distributions, layer 1"
    assert any("(layer 1, head 3; visible pairs)" in m.value for m in at.markdown)
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "3"


def test_the_listener_page_is_served_from_the_app_and_names_no_other_origin():
    html = (Path(__file__).resolve().parents[2] / "app" / "link_frontend" / "index.html").read_text()
    assert "plotly_buttonclicked" in html and "streamlit:setComponentValue" in html
    assert "http://" not in html and "https://" not in html and "<script src" not in html
    assert all(s in html for s in ("st-key-link-", "st-key-fig-"))
