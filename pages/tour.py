"""Tour (/tour): the lecture in eighteen steps, or the lecturer's own tour. Each built-in step opens the view that
shows its topic, built now from the model it uses, with two or three sentences written from the numbers on screen
and the one thing to look at marked on the figure; a lecturer's step shows their words and opens their view.
Previous / Next, a step picker and `?step=N` in the URL; a link opens the same view on its own page; the tour is
edited, saved and loaded as a file, downloads as an offline HTML handout, and each figure as PNG and SVG."""

import streamlit as st
from attnlab.app.frame import chart, guard, page, presenting
from attnlab.app.tour import STEPS, step_of
from attnlab.app.tour.core import WIDTH
from attnlab.app.tour.editor import KEY_ENTRIES, KEY_ERROR, active, editor
from attnlab.app.tour.handout import handout_apart, handout_html, views
from attnlab.app.tour.images import available, figure_image, file_stem
from attnlab.app.url_state import select, url_active

TOUR_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.2rem; padding-bottom: 1rem; }
.st-key-tour_view [data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
.st-key-tour_view [data-testid="stColumn"]:first-child { min-width: min(540px, 100%); }
[data-testid="stMainBlockContainer"] h1 { padding-top: 0; padding-bottom: .2rem; }
</style>"""
# Presentation mode on a 1024×768 projector: no sidebar (a button here leaves the mode), narrower margins.
PRESENT_TOUR_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"] {
  display: none !important; }
[data-testid="stMainBlockContainer"] { padding: 1rem 2rem 1rem 2rem; max-width: 100%; }
[data-testid="stMainBlockContainer"] h1 { font-size: 1.7rem !important; }
.st-key-step label { display: none; }
[data-testid="stMainBlockContainer"] [data-testid="stMarkdownContainer"] p { font-size: 1rem; }
</style>"""


def move(by: int, n: int) -> None:
    """Previous / Next: one step back or on (the picker's value, and with it the URL)."""
    st.session_state["step"] = min(max(int(st.session_state.get("step", 1)) + by, 1), n)


def leave_presentation() -> None:
    """The sidebar's presentation switch, off (the sidebar is hidden while presenting the tour)."""
    st.session_state["present"] = False


tour = active()
BUILT_IN = all("builtin" in e for e in tour.entries) and len(tour.steps) == len(STEPS)
with page("Lecture tour", f"The lecture in {len(STEPS)} steps: each view with its model, its input and what to look at."
          if BUILT_IN else f"{tour.title}: {len(tour.steps)} steps, each a view with its settings and your words."):
    present = presenting()
    st.html(TOUR_CSS + (PRESENT_TOUR_CSS if present else ""))
    if st.session_state.get(KEY_ERROR):
        st.error(st.session_state[KEY_ERROR], icon=":material/error:")
    steps, N = tour.steps, len(tour.steps)
    raw = st.query_params.get("step") if url_active() else None
    _, bad = step_of(raw, N) if raw is not None else (1, "")
    if bad or int(st.session_state.get("step", 1)) > N:
        st.session_state["step"] = 1  # a step number that is not one: start at the beginning
    c1, c2, c3 = st.columns([1.4, 5, 1.4], vertical_alignment="bottom")
    k = int(st.session_state.get("step", 1))
    c1.button("Previous", on_click=move, args=(-1, N), disabled=k <= 1, key="tour_prev",
              icon=":material/arrow_back:", width="stretch")
    c3.button("Next", on_click=move, args=(1, N), key="tour_next", icon=":material/arrow_forward:",
              disabled=k >= N, width="stretch")
    k = select("Step", list(range(1, N + 1)), "step", 1, where=c2, format_func=lambda i: f"{i}. {steps[i - 1].title}",
               help="Jump to a topic; the step is kept in the URL (/tour?step=7).")
    if bad:
        st.info(bad, icon=":material/info:")
    step, entry = steps[k - 1], st.session_state[KEY_ENTRIES][k - 1]
    st.subheader(f"Step {k} of {N}: {step.title}", anchor=False)
    view = None
    with guard():
        if "builtin" in entry:
            view = step.build(present)
            left, right = st.container(key="tour_view").columns([3, 2], gap="medium")  # the narrative wraps below
            # the figure where the window is too narrow for both (1024 px with the sidebar)
            with left:
                chart(view.fig, key="tour", name=f"tour-step-{k}", width=WIDTH)  # fitted to the tour's column
            with right:
                st.markdown(view.narrative)
                st.markdown(f":orange[**Look at:** {view.look}]")
                st.markdown(f"[Open this view on its page ↗]({step.link(view, present)})")
        else:  # a lecturer's view: the page draws it (the handout runs the page to take its figure)
            st.markdown(entry["text"] or "*(no words yet: add them under “Edit this tour”)*")
            st.markdown(f"#### [Show this view ↗]({step.link_of(entry.get('state', {}), present)})")
        if present:
            st.button("Leave presentation mode", on_click=leave_presentation, key="tour_leave", type="tertiary")
    if not present:
        editor(k)
        c1, c2, c3 = st.columns(3)
        apart = any("builtin" not in e for e in tour.entries)  # a lecturer's views run their pages: another process
        c1.download_button("The tour as an HTML handout", lambda: handout_apart(tour.title, tour.entries) if apart
                           else handout_html(views(False, steps), "a4", tour.title),
                           file_name="attnlab-tour.html", mime="text/html", icon=":material/download:",
                           on_click="ignore", help="Every step with its figure (plotly.js inside: opens offline) — or "
                                                   "run `attnlab handout --pdf tour.pdf --paper a4`.")
        missing = available()
        for col, fmt in ((c2, "png"), (c3, "svg")):
            col.download_button(f"This step's figure as {fmt.upper()}", lambda f=fmt: figure_image(view.fig, f),
                                file_name=f"{file_stem(k, step)}.{fmt}", mime=f"image/{'svg+xml' if fmt == 'svg' else fmt}",
                                icon=":material/image:", on_click="ignore", disabled=bool(missing) or view is None,
                                key=f"tour_{fmt}", help=missing or "1024×768, the projector's size, with its colours.")
