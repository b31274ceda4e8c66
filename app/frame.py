"""The frame of every page: title and question, presentation mode and the chart-download format in the
sidebar, the URL written at the end of the run, option panels, charts, and every error shown as a message
(what went wrong and what to do, never a traceback)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from attnlab.app import state
from attnlab.app.figures.fit import fit_width
from attnlab.app.figures.style import MAIN_PX
from attnlab.app.navigation import icon_of
from attnlab.app.run_settings import RUN_DEVICE, RUN_DTYPE, can_switch_device, run_settings
from attnlab.app.tour.editor import add_button
from attnlab.app.url_state import URL, begin_run, end_run, kept, reset_positions, select, sync_url, toggle
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.inputs import InputError, OverContextError
from attnlab.model.transformer import ContextLengthError

log = logging.getLogger("attnlab.app")
PRESENT_CSS = """<style>
html { font-size: 19px; }
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.15rem; }
h1 { font-size: 2.6rem !important; }
[data-testid="stSidebarNav"] * { font-size: 0.84rem !important; }
</style>"""  # the sidebar's page names keep their usual size: larger, the longest were cut


# -- errors ------------------------------------------------------------------------------------------------
# The model layer words a few messages for the command line; on a page they name the box to use instead.
CLI_WORDING = (
    (" (--src-text)", ": type a source text in the Source box"),
    (", --device cuda,", ""),  # "(a run on a CUDA GPU, --device cuda, reads up to …)"
)


def app_wording(msg: str) -> str:
    """`msg` with the command line's flags replaced by what to do on the page."""
    for cli, app in CLI_WORDING:
        msg = msg.replace(cli, app)
    return msg


def error_message(e: BaseException) -> tuple[str, str]:
    """(level, message) for an exception: what went wrong and what to do. Never a traceback."""
    msg = app_wording(str(e).strip() or type(e).__name__)
    if isinstance(e, state.BusyError):
        return "warning", msg
    if isinstance(e, InputError):
        return "error", f"{msg[0].upper()}{msg[1:]}. Change the text or the model and try again."
    if isinstance(e, CheckpointError):
        return "error", f"The model could not be loaded: {msg}. Pick another model or fix the folder."
    if isinstance(e, (ValueError, IndexError, KeyError)):
        return "error", f"{msg[0].upper()}{msg[1:]}. Change the options above and try again."
    if isinstance(e, MemoryError):
        return "error", "Out of memory for this input. Use a shorter text or a smaller model."
    return "error", (f"Something went wrong ({type(e).__name__}: {msg[:300]}). "
                     "Try a shorter text, another model, or reload the page.")


def ordinary(e: BaseException) -> bool:
    """An error of the input, not of the program (empty text, text past the context, a bad model folder, a busy
    server): the server logs one line for it, no traceback."""
    return isinstance(e, (InputError, ContextLengthError, CheckpointError, state.BusyError))


def show_error(e: BaseException) -> None:
    """The exception as a warning or error box on the page; the server log gets one line for an ordinary input
    error and the traceback for anything else."""
    level, msg = error_message(e)
    if ordinary(e):
        log.warning("input refused: %s: %s", type(e).__name__, " ".join(str(e).split())[:300])
    else:
        log.warning("page error: %s", "".join(traceback.format_exception(e)))
    (st.warning if level == "warning" else st.error)(msg, icon=":material/warning:" if level == "warning"
                                                      else ":material/error:")
    if isinstance(e, OverContextError):
        offer_first_tokens(e)


TEXT_KEYS = {"text": "text", "target text": "text", "source text": "src"}  # what the model read -> its text box


def offer_first_tokens(e: OverContextError) -> None:
    """Beside the refusal of an over-long text in the sidebar's box: a button that keeps its first tokens (as
    many as the refusing model reads). Nothing when the box's text is not the one refused."""
    key = TEXT_KEYS.get(e.what)
    text = st.session_state.get(key) if key else None
    if not text or not e.model:
        return
    try:
        cut = state.first_tokens(e.model, text, key == "src", e.limit)
    except Exception:  # noqa: BLE001 — the offer is optional; the refusal above already says what is wrong
        return
    if cut and cut != text:
        st.button(f"Keep the first {e.limit:,} tokens", key="keep_first_tokens", on_click=_keep_text,
                  args=(key, cut), icon=":material/content_cut:",
                  help=f"Cut the text after the last whole token that fits: {len(cut):,} of {len(text):,} characters.")


def _keep_text(key: str, text: str) -> None:
    ss = st.session_state
    ss[key], ss["preset"] = text, "custom"
    kept().update({key: text, "preset": "custom"})
    reset_positions()


@contextmanager
def guard() -> Iterator[None]:
    """Show any exception inside the block as a message and carry on with the rest of the page."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 — every error becomes a message; no traceback reaches the page
        show_error(e)


# -- the page ----------------------------------------------------------------------------------------------
@contextmanager
def page(title: str, question: str, *, icon: str = "") -> Iterator[None]:
    """The frame of every page: title, the lecturer's question, presentation mode and image-export
    format in the sidebar, URL sync at the end, and any error shown as a message. The title's icon is the
    `icon` when it is a `:material/…:` name, else (an emoji: they render as empty boxes in Debian's
    chromium) the page's Material icon in the navigation."""
    begin_run()
    st.session_state[URL] = {}
    present = toggle("Presentation mode", "present", False, where=st.sidebar,
                     help="Large fonts and fewer controls, for a projector.")
    select("Chart download format", ("png", "svg"), "img", "png", where=st.sidebar, show=not present,
           help="What the camera icon in each chart's toolbar saves.")
    device_sidebar()
    if not present:
        add_button(title)
    if present:
        st.html(PRESENT_CSS)
    st.title(f"{title_icon(title, icon)} {title}".strip())
    st.markdown(f"*{question}*")
    try:
        yield
    except Exception as e:  # noqa: BLE001 — no traceback ever reaches the page
        show_error(e)
    finally:
        sync_url()
        end_run()


def switch_caption(layers, what: str, leaves: str | None = None) -> None:
    """The caption under a chart whose own buttons switch heads (and layers) in the browser; none without them.
    `leaves`: what the buttons leave as it is; None: the page follows them (app.chart_link)."""
    if layers:
        buttons = "The layer and head buttons" if len(layers) > 1 else "The head buttons"
        if leaves is None:
            st.caption(f"{buttons} on the chart switch {what} in the browser, instantly; the rest of the page, the "
                       "Layer and Head choices above and the link then follow.")
            return
        st.caption(f"{buttons} on the chart switch {what} in the browser, instantly; they are not kept in the link "
                   f"and leave {leaves} as they are (the Layer and Head choices above set those, and the link).")


def title_icon(title: str, icon: str = "") -> str:
    """The icon shown before a page title: a `:material/…:` name, never an emoji (an emoji is replaced by
    the navigation's icon for the page with that title). No icon asked for, none shown."""
    if not icon or (icon.startswith(":material/") and icon.endswith(":")):
        return icon
    return icon_of(title)


def device_sidebar() -> None:
    """Where models run, in the sidebar: a caption (device and dtype), and a switch only on a machine with a
    CUDA GPU (the app never offers what the machine cannot do)."""
    if can_switch_device():
        ss = st.session_state
        env = run_settings()
        ss.setdefault(RUN_DEVICE, env[0])
        ss.setdefault(RUN_DTYPE, env[1])
        st.sidebar.selectbox("Device", ("cuda", "cpu"), key=RUN_DEVICE,
                             help="cuda runs the fused backends' GPU kernels (FlashAttention-2 in 16 bits).")
        st.sidebar.selectbox("Precision", ("bfloat16", "float16", "float32"), key=RUN_DTYPE,
                             help="16-bit runs are checked against a float32 eager reference.")
    try:
        device, dtype = run_settings()
    except InputError as e:  # e.g. ATTNLAB_DEVICE=cuda on a machine without one
        st.sidebar.caption(f"Device: {e}")
        return
    where = "" if can_switch_device() else " (no CUDA GPU on this machine)"
    st.sidebar.caption(f"Runs on **{device}** in **{dtype}**{where}.")


def presenting() -> bool:
    """Presentation mode (the sidebar toggle): large fonts, fewer controls."""
    return bool(kept().get("present", st.session_state.get("present", False)))


def options(label: str = "Options"):
    """A container for a page's options (collapsed in presentation mode)."""
    return st.expander(label, expanded=not presenting())


def chart(fig, key: str | None = None, name: str = "attnlab", width: int | None = None):
    """st.plotly_chart with the toolbar's download set to PNG or SVG (sidebar choice), its tick labels thinned or
    turned so that none overlap at the `width` it gets (px; default the main column's, app.columns.column_px for
    a column's)."""
    fit_width(fig, width or MAIN_PX[presenting()])
    fmt = kept().get("img", "png")
    cfg = {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "filename": name, "scale": 2}}
    return st.plotly_chart(fig, key=None if key is None else f"fig-{key}", config=cfg, theme="streamlit")
