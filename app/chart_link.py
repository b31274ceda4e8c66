"""One head everywhere: a head matrix's own layer/head buttons (app.figures.switcher) drive the page's Layer and
Head. A press switches the matrix in the browser at once, as before; then the script (or the fragment holding
the chart) reruns with that layer and head, so every other view, caption, download and the link follow. In that
run the matrix's figure is rebuilt exactly as it was sent (around the same head), so Streamlit leaves the chart
the browser already switched untouched."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

ANCHOR = "_chart_anchor"  # session_state[ANCHOR][chart]: the (layer, head) the chart's figure was built around
SWITCHED = "_chart_switched"  # session_state: (chart, (layer, head)) of the press that started this run

# A listener with nothing to show (link_frontend/index.html): a Streamlit component of the classic kind, whose
# value is plain JSON ({"pair": [layer, head], "at": ms}), as session state must be here (pickled: the served
# app enforces it). The newer st.components.v2 keeps an unpicklable object in session state.
_listener = components.declare_component("attnlab_chart_link", path=str(Path(__file__).parent / "link_frontend"))


def anchor(chart: str, layer: int, head: int) -> tuple[int, int]:
    """The (layer, head) to build chart `chart`'s switcher figure around: in a run its own buttons started,
    the one it was built around before (the figure goes out unchanged: the browser keeps what the press showed);
    in any other run (layer, head) itself."""
    ss = st.session_state
    anchors = ss.setdefault(ANCHOR, {})
    if ss.pop(SWITCHED, None) == (chart, (layer, head)) and chart in anchors:
        return anchors[chart]
    anchors[chart] = (layer, head)
    return layer, head


def link(chart: str, layer_key: str = "layer", head_key: str = "head") -> None:
    """Listen to chart `chart`'s own buttons (drawn with frame.chart(key=chart)): a press sets
    st.session_state[layer_key] and [head_key] to the button's head and reruns. Draws nothing."""
    def switched():
        value = st.session_state.get(f"link-{chart}")
        pair = value.get("pair") if isinstance(value, dict) else None
        if isinstance(pair, list) and len(pair) == 2:
            layer, head = int(pair[0]), int(pair[1])
            st.session_state[layer_key], st.session_state[head_key] = layer, head
            st.session_state[SWITCHED] = (chart, (layer, head))

    _listener(key=f"link-{chart}", on_change=switched, default=None)
