"""URL state: the widgets whose values live in the URL (`st.query_params`) and carry over between pages.

Every widget made here is seeded, in this order, from the URL (on a session's first run only: a bookmark),
from the value it had on another page of this session (`kept()`), or from its default. It records its value
for the other pages and for the URL (`session_state[URL]`); `frame.page()` writes the URL at the end of each
run (`sync_url`), so a view can be bookmarked.

Streamlit pushes a browser-history entry whenever the URL written from Python changes, and reruns the page
with the old URL on Back/Forward. `begin_run()` notices such a run (the URL is not the one this session wrote
last) and lets the URL seed the widgets again, so Back returns to the previous view. `keep_history()` stops the
app's own first write on a page (filling in the values a bare /page or a short bookmark left out) from adding
an entry that Back would step onto without changing anything.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from attnlab.model.captured import GROUP_LABELS

KEEP = "_keep"  # session_state[KEEP][key]: the last value of each widget, across pages
URL = "_url_now"  # session_state[URL][key]: the values this run writes to the URL
URL_DONE = "_url_done"  # set after a session's first run: from then on the URL seeds widgets only after Back
URL_LAST = "_url_last"  # the URL this session wrote last
URL_BACK = "_url_back"  # True during a run whose URL the browser changed (Back/Forward): the URL seeds widgets
POSITION_KEYS = ("query", "zoom_q", "zoom_k", "target", "strip_layer", "strip_head", "why_query", "why_key")  # forgotten with the text
BUTTONS = 6  # index(): one button per value up to this many (they fit a quarter of the page), a slider beyond


# -- the state behind every widget ---------------------------------------------------------------------------
def kept() -> dict:
    """The last value of each widget in this session, whatever page drew it."""
    return st.session_state.setdefault(KEEP, {})


def url_active() -> bool:
    """The URL seeds widgets on a session's first run (a bookmark) and on a run after Back/Forward; other runs
    use session state."""
    ss = st.session_state
    return not ss.get(URL_DONE, False) or bool(ss.get(URL_BACK, False))


def begin_run() -> None:
    """At the start of a page run: did the browser change the URL since this session last wrote it (Back or
    Forward)? Then the URL seeds this run's widgets (`url_active`)."""
    ss = st.session_state
    ss[URL_BACK] = ss.get(URL_DONE, False) and URL_LAST in ss and dict(st.query_params) != ss[URL_LAST]


def end_run() -> None:
    """At the end of a page run: from now on session state, not the URL, seeds the widgets."""
    st.session_state[URL_BACK] = False


def _parsed(key: str, parse: Callable[[str], object], valid: Callable[[object], bool]):
    """The URL's value for `key` when the URL seeds widgets and the value is valid, else None."""
    raw = st.query_params.get(key) if url_active() else None
    if raw is None:
        return None
    try:
        v = parse(raw)
    except (ValueError, TypeError):
        return None
    return v if v is not None and valid(v) else None


def seed(key: str, default, parse: Callable[[str], object], valid: Callable[[object], bool]) -> None:
    """Give st.session_state[key] a valid value before its widget is drawn: URL (a bookmark, or Back) >
    this session's value > kept from another page > default."""
    ss = st.session_state
    from_url = _parsed(key, parse, valid)
    if from_url is not None:
        ss[key] = from_url
        return
    if key in ss and valid(ss[key]):
        ss[key] = ss[key]  # re-assign: a widget with this key on another page would otherwise reset it
        return
    before = kept().get(key, None)
    ss[key] = before if before is not None and valid(before) else default


def remember(key: str, value, url_value: str | None = None) -> None:
    """Keep `value` for the other pages and, when `url_value` is given, write it to the URL this run."""
    kept()[key] = value
    if url_value is not None:
        st.session_state.setdefault(URL, {})[key] = url_value


def reset_positions() -> None:
    """Forget token positions (query row, zoom window) when the text or model changes."""
    for k in POSITION_KEYS:
        st.session_state.pop(k, None)
        kept().pop(k, None)


def sync_url() -> None:
    """Write this run's values to the URL (only when they changed: a new URL is a browser history entry)."""
    st.session_state[URL_DONE] = True
    want = {k: str(v) for k, v in st.session_state.get(URL, {}).items()}
    if dict(st.query_params) != want:
        st.query_params.from_dict(want)
    st.session_state[URL_LAST] = want


# A history entry that only fills in the parameters of the current one (same path, every current value kept:
# a page switch's bare /page, a short bookmark) replaces it; a changed value still pushes a new entry.
HISTORY_JS = """<script>(() => {
  const w = window;
  if (w.__attnlabHistory) return;
  w.__attnlabHistory = true;
  const push = w.history.pushState.bind(w.history);
  w.history.pushState = (state, title, url) => {
    try {
      const next = new URL(url, w.location.href), now = new URL(w.location.href);
      if (next.pathname === now.pathname && [...now.searchParams].every(([k, v]) => next.searchParams.get(k) === v))
        return w.history.replaceState(state, title, url);
    } catch (e) { /* fall through: an ordinary push */ }
    return push(state, title, url);
  };
})();</script>"""


def keep_history() -> None:
    """Install HISTORY_JS once per browser tab (a constant script, no user input in it), in the sidebar."""
    st.sidebar.html(HISTORY_JS, unsafe_allow_javascript=True)


# -- widgets -------------------------------------------------------------------------------------------------
def select(label: str, options, key: str, default=None, *, where=None, format_func=str, help: str | None = None,
           show: bool = True, horizontal: bool = False):
    """A selectbox (or a segmented control when `horizontal`) whose value lives in the URL as str(option)."""
    options = list(options)
    if not options:
        raise ValueError(f"no options for {label}")
    default = default if default in options else options[0]
    by_str = {str(o): o for o in options}
    seed(key, default, lambda s: by_str.get(s), lambda v: v in options)
    where = where or st
    if show and horizontal:
        value = where.segmented_control(label, options, key=key, format_func=format_func, help=help, required=True)
    elif show:
        value = where.selectbox(label, options, key=key, format_func=format_func, help=help)
    else:
        value = st.session_state[key]
    remember(key, value, str(value))
    return value


def group_select(groups: dict, where=None) -> str:
    """Which attention to show (self, encoder, decoder or cross); cross first, hidden when there is one."""
    return select("Attention", list(groups), "group", "cross" if "cross" in groups else None, where=where,
                  format_func=lambda g: GROUP_LABELS.get(g, g), show=len(groups) > 1)


def slider(label: str, lo: int | float, hi: int | float, key: str, default, *, where=None, step=None,
           help: str | None = None, show: bool = True):
    """A number slider (int if the bounds are ints) stored in the URL."""
    is_int = isinstance(lo, int) and isinstance(hi, int) and isinstance(default, int)
    cast = int if is_int else float
    default = min(max(cast(default), lo), hi)
    seed(key, default, lambda s: cast(float(s)) if not is_int else int(s), lambda v: isinstance(v, (int, float))
         and not isinstance(v, bool) and lo <= v <= hi)
    where = where or st
    if show and hi > lo:
        value = where.slider(label, lo, hi, key=key, step=step, help=help)
    else:
        value = st.session_state[key]
    remember(key, value, str(value))
    return value


def index(label: str, n: int, key: str, default: int = 0, *, where=None) -> int:
    """Pick 0..n−1 (a layer, a head): one button per value up to BUTTONS values (one click, no slider
    debounce, readable on a projector), a slider beyond (a button group does not wrap: 12 heads overflowed
    a column). Stored in the URL either way."""
    if n <= BUTTONS:
        return select(label, list(range(n)), key, min(max(default, 0), n - 1), where=where, horizontal=True)
    return slider(label, 0, n - 1, key, default, where=where)


def range_slider(label: str, lo: int, hi: int, key: str, default: tuple[int, int]) -> tuple[int, int]:
    """An int range slider (lo..hi inclusive); kept across pages, not in the URL."""
    def ok(v):
        return isinstance(v, tuple) and len(v) == 2 and lo <= v[0] <= v[1] <= hi

    default = (max(lo, min(default[0], hi)), max(lo, min(default[1], hi)))
    seed(key, default, lambda s: tuple(int(x) for x in s.split("-")), ok)
    value = st.slider(label, lo, hi, key=key) if hi > lo else st.session_state[key]
    remember(key, tuple(value))
    return tuple(value)


def toggle(label: str, key: str, default: bool = False, *, where=None, help: str | None = None, show: bool = True):
    """An on/off switch stored in the URL as 1 or 0."""
    seed(key, default, lambda s: s.lower() in ("1", "true", "yes", "on"), lambda v: isinstance(v, bool))
    where = where or st
    value = where.toggle(label, key=key, help=help) if show else st.session_state[key]
    remember(key, value, "1" if value else "0")
    return value


def token_select(label: str, tokens, key: str, default: int, *, where=None, help=None) -> int:
    """Pick a token position; options show 'index · token'."""
    opts = list(range(len(tokens)))
    return select(label, opts, key, min(max(default, 0), len(opts) - 1), where=where, help=help,
                  format_func=lambda i: f"{i} · {tokens[i]}")
