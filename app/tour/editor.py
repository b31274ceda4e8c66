"""The lecturer's tour in the app: the active tour (the built-in one, the file `attnlab app --tour FILE` names, or
one loaded or edited here) kept in the session as tour-file entries; "Add this view to my tour" on every page;
reorder, edit, delete, save and load on the tour page."""

from __future__ import annotations

import os

import streamlit as st
from attnlab.app.navigation import PAGES
from attnlab.app.tour.tour_file import (
    MAX_STEPS,
    Tour,
    TourFileError,
    load_tour,
    parse_tour,
    read_tour,
    tour_json,
)

ENV = "ATTNLAB_TOUR"  # the tour file `attnlab app --tour FILE` opens with
KEY_ENTRIES, KEY_TITLE, KEY_ERROR = "tour_entries", "tour_title", "tour_error"
URL_PATH = {t: u for _, t, u, _ in PAGES}  # a page's title -> its URL path


def _start() -> None:
    """The session's first tour: the file in ATTNLAB_TOUR (checked by `attnlab app`), else the built-in one."""
    ss = st.session_state
    if KEY_ENTRIES in ss:
        return
    try:
        tour = load_tour(os.environ.get(ENV) or None)
    except TourFileError as e:
        ss[KEY_ERROR] = str(e)
        tour = load_tour(None)
    ss[KEY_ENTRIES], ss[KEY_TITLE] = [dict(e) for e in tour.entries], tour.title


def active() -> Tour:
    """The session's tour, built from its entries."""
    _start()
    ss = st.session_state
    return parse_tour({"title": ss[KEY_TITLE], "steps": ss[KEY_ENTRIES]}, "this tour")


def add_view(title: str) -> None:
    """'Add this view to my tour': the page and its URL state now, as a new last step."""
    _start()
    if len(st.session_state[KEY_ENTRIES]) >= MAX_STEPS:  # more would be no tour: its page would only refuse it
        st.toast(f"The tour has {MAX_STEPS} steps, the most a tour holds: delete one on the Lecture tour page first.",
                 icon=":material/block:")
        return
    state = {k: v for k, v in st.query_params.to_dict().items() if k != "present"}
    entry = {"page": URL_PATH[title], "title": f"{title}: my view", "text": "", "state": state}
    st.session_state[KEY_ENTRIES] = [*st.session_state[KEY_ENTRIES], entry]
    st.toast(f"Added as step {len(st.session_state[KEY_ENTRIES])} of the tour (Lecture tour page).",
             icon=":material/playlist_add:")


def add_button(title: str) -> None:
    """The sidebar button of every page but the tour's."""
    if URL_PATH.get(title, "tour") != "tour":
        st.sidebar.button("Add this view to my tour", key="tour_add", on_click=add_view, args=(title,),
                          icon=":material/playlist_add:", help="The page with its current settings (its URL) "
                          "becomes the tour's last step; edit its title and words on the Lecture tour page.")


def _move(i: int, by: int) -> None:
    e = list(st.session_state[KEY_ENTRIES])
    j = i + by
    if 0 <= j < len(e):
        e[i], e[j] = e[j], e[i]
        st.session_state[KEY_ENTRIES] = e
        st.session_state["step"] = j + 1


def _delete(i: int) -> None:
    e = list(st.session_state[KEY_ENTRIES])
    if len(e) > 1:
        del e[i]
        st.session_state[KEY_ENTRIES] = e
        st.session_state["step"] = min(i + 1, len(e))


def _edit(i: int, field: str, key: str) -> None:
    e = [dict(x) for x in st.session_state[KEY_ENTRIES]]
    value = st.session_state[key]
    if field == "title" and not value.strip():
        return  # a step keeps a title
    e[i][field] = value
    st.session_state[KEY_ENTRIES] = e


def _load(key: str) -> None:
    f = st.session_state.get(key)
    if f is None:
        return
    try:
        tour = read_tour(f.getvalue(), f.name)
    except TourFileError as e:
        st.session_state[KEY_ERROR] = str(e)
        return
    st.session_state[KEY_ENTRIES], st.session_state[KEY_TITLE] = [dict(x) for x in tour.entries], tour.title
    st.session_state["step"], st.session_state[KEY_ERROR] = 1, ""


def _builtin() -> None:
    tour = load_tour(None)
    st.session_state[KEY_ENTRIES], st.session_state[KEY_TITLE] = [dict(x) for x in tour.entries], tour.title
    st.session_state["step"] = 1


def editor(k: int) -> None:
    """Edit step k (title, words, place), the tour's title; save it as a file, load one, or go back to the
    built-in tour."""
    ss = st.session_state
    entries = ss[KEY_ENTRIES]
    e, i = entries[k - 1], k - 1
    with st.expander("Edit this tour", icon=":material/edit:"):
        st.text_input("Tour title", value=ss[KEY_TITLE], key="tour_title_in", max_chars=200,
                      on_change=lambda: ss.update({KEY_TITLE: ss["tour_title_in"].strip() or ss[KEY_TITLE]}))
        st.text_input(f"Step {k} title", value=e["title"], key=f"tour_t_{k}_{len(entries)}", max_chars=200,
                      on_change=_edit, args=(i, "title", f"tour_t_{k}_{len(entries)}"))
        label = "Your words (shown after the model's)" if "builtin" in e else "Your words (Markdown)"
        st.text_area(label, value=e.get("text", ""), key=f"tour_x_{k}_{len(entries)}", max_chars=2000,
                     on_change=_edit, args=(i, "text", f"tour_x_{k}_{len(entries)}"))
        c1, c2, c3, c4 = st.columns(4)
        c1.button("Move earlier", key="tour_up", on_click=_move, args=(i, -1), disabled=i == 0,
                  icon=":material/arrow_upward:")
        c2.button("Move later", key="tour_down", on_click=_move, args=(i, 1), disabled=i == len(entries) - 1,
                  icon=":material/arrow_downward:")
        c3.button("Delete this step", key="tour_del", on_click=_delete, args=(i,), disabled=len(entries) == 1,
                  icon=":material/delete:")
        c4.button("Built-in tour", key="tour_builtin", on_click=_builtin, icon=":material/restart_alt:",
                  help="Replace this tour with the lecture's eighteen steps.")
        st.download_button("Save the tour (JSON)", tour_json(ss[KEY_TITLE], entries), file_name="attnlab-tour.json",
                           mime="application/json", icon=":material/save:", on_click="ignore",
                           help="Open it again below, or run `attnlab app --tour FILE` / `attnlab handout --tour "
                                "FILE`.")
        st.file_uploader("Load a tour file", type=["json"], key="tour_file", on_change=_load, args=("tour_file",))
