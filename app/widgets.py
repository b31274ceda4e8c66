"""Widgets shared by the pages: inputs (model, text, presets, backend), URL state, presentation mode,
downloads, the token strip and error display.

URL state: every widget made here is seeded, in this order, from the URL (`st.query_params`), from
the value it had on another page of this session, or from its default; at the end of each run the
page writes the current values back to the URL (`page()` does it), so a view can be bookmarked.
"""

from __future__ import annotations

import html
import io
import json
import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import streamlit as st

from app import state

log = logging.getLogger("attnlab.app")
KEEP = "_keep"  # session_state[KEEP][key]: the last value of each widget, across pages
URL = "_url_now"  # session_state[URL][key]: the values this run writes to the URL
FOLDER = "local folder…"
BACKENDS = ("eager", "sdpa", "flash")
URL_TEXT_LIMIT = 1500  # longer custom texts are not put in the URL
POSITION_KEYS = ("query", "zoom_q", "zoom_k", "target")


# -- errors ------------------------------------------------------------------------------------------------
def error_message(e: BaseException) -> tuple[str, str]:
    """(level, message) for an exception: what went wrong and what to do. Never a traceback."""
    from model.checkpoint import CheckpointError
    from model.inputs import InputError

    msg = str(e).strip() or type(e).__name__
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


def show_error(e: BaseException, where=st) -> None:
    level, msg = error_message(e)
    log.warning("page error: %s", "".join(traceback.format_exception(e)))
    (where.warning if level == "warning" else where.error)(msg, icon="⚠️" if level == "warning" else "🚫")


@contextmanager
def guard(where=st) -> Iterator[None]:
    """Show any exception inside the block as a message and carry on with the rest of the page."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 — every error becomes a message; no traceback reaches the page
        show_error(e, where)


# -- URL-backed widget state -------------------------------------------------------------------------------
def _kept() -> dict:
    return st.session_state.setdefault(KEEP, {})


def _seed(key: str, default, parse: Callable[[str], object], valid: Callable[[object], bool]) -> None:
    """Give st.session_state[key] a valid value before its widget is drawn: URL > kept > default."""
    ss = st.session_state
    if key in ss and valid(ss[key]):
        ss[key] = ss[key]  # re-assign: a widget with this key on another page would otherwise reset it
        return
    value = default
    raw = st.query_params.get(key) if url_active() else None
    kept = _kept().get(key, None)
    if raw is not None:
        try:
            v = parse(raw)
            if valid(v):
                value = v
        except (ValueError, TypeError):
            pass
    elif kept is not None and valid(kept):
        value = kept
    ss[key] = value


def url_active() -> bool:
    """The URL seeds widgets only on a session's first run (a bookmark); later runs use session state."""
    return not st.session_state.get("_url_done", False)


def reset_positions() -> None:
    """Forget token positions (query row, zoom window) when the text or model changes."""
    for k in POSITION_KEYS:
        st.session_state.pop(k, None)
        _kept().pop(k, None)


def _remember(key: str, value, url_value: str | None = None) -> None:
    _kept()[key] = value
    if url_value is not None:
        st.session_state.setdefault(URL, {})[key] = url_value


def select(label: str, options, key: str, default=None, *, where=None, format_func=str, help: str | None = None,
           show: bool = True, on_change=None, horizontal: bool = False):
    """A selectbox (or a segmented control when `horizontal`) whose value lives in the URL as str(option)."""
    options = list(options)
    if not options:
        raise ValueError(f"no options for {label}")
    default = default if default in options else options[0]
    by_str = {str(o): o for o in options}
    _seed(key, default, lambda s: by_str[s] if s in by_str else None, lambda v: v in options)
    where = where or st
    if show and horizontal:
        value = where.segmented_control(label, options, key=key, format_func=format_func, help=help,
                                        on_change=on_change, required=True)
    elif show:
        value = where.selectbox(label, options, key=key, format_func=format_func, help=help, on_change=on_change)
    else:
        value = st.session_state[key]
    _remember(key, value, str(value))
    return value



def group_select(groups: dict, where=None) -> str:
    """Which attention to show (self, encoder, decoder or cross); cross first, hidden when there is one."""
    return select("Attention", list(groups), "group", "cross" if "cross" in groups else None, where=where,
                  format_func=lambda g: state.GROUP_LABELS.get(g, g), show=len(groups) > 1)

def slider(label: str, lo: int | float, hi: int | float, key: str, default, *, where=None, step=None,
           help: str | None = None, show: bool = True, fmt: str | None = None):
    """A number slider (int if the bounds are ints) stored in the URL."""
    is_int = isinstance(lo, int) and isinstance(hi, int) and isinstance(default, int)
    cast = int if is_int else float
    default = min(max(cast(default), lo), hi)
    _seed(key, default, lambda s: cast(float(s)) if not is_int else int(s), lambda v: isinstance(v, (int, float))
          and not isinstance(v, bool) and lo <= v <= hi)
    where = where or st
    if show and hi > lo:
        value = where.slider(label, lo, hi, key=key, step=step, help=help, format=fmt)
    else:
        value = st.session_state[key]
    _remember(key, value, str(value))
    return value


def index(label: str, n: int, key: str, default: int = 0, *, where=None, help: str | None = None,
          show: bool = True, buttons: int = 16) -> int:
    """Pick 0..n−1 (a layer, a head): one button per value up to `buttons` values (one click, no slider
    debounce, readable on a projector), a slider beyond. Stored in the URL either way."""
    if n <= buttons:
        return select(label, list(range(n)), key, min(max(default, 0), n - 1), where=where, help=help, show=show,
                      horizontal=True)
    return slider(label, 0, n - 1, key, default, where=where, help=help, show=show)


def range_slider(label: str, lo: int, hi: int, key: str, default: tuple[int, int], *, where=None,
                 show: bool = True) -> tuple[int, int]:
    """An int range slider (lo..hi inclusive); kept across pages, not in the URL."""
    def ok(v):
        return isinstance(v, tuple) and len(v) == 2 and lo <= v[0] <= v[1] <= hi

    default = (max(lo, min(default[0], hi)), max(lo, min(default[1], hi)))
    _seed(key, default, lambda s: tuple(int(x) for x in s.split("-")), ok)
    where = where or st
    value = where.slider(label, lo, hi, key=key) if show and hi > lo else st.session_state[key]
    _remember(key, tuple(value))
    return tuple(value)


def toggle(label: str, key: str, default: bool = False, *, where=None, help: str | None = None, show: bool = True):
    _seed(key, default, lambda s: s.lower() in ("1", "true", "yes", "on"), lambda v: isinstance(v, bool))
    where = where or st
    value = where.toggle(label, key=key, help=help) if show else st.session_state[key]
    _remember(key, value, "1" if value else "0")
    return value


def presenting() -> bool:
    return bool(_kept().get("present", st.session_state.get("present", False)))


def is_dark() -> bool:
    """The browser's theme (Streamlit reports it from the second run on), else the server's theme.base."""
    try:
        kind = st.context.theme.type
    except Exception:  # noqa: BLE001 — no browser context (tests)
        kind = None
    if kind is None:
        kind = st.get_option("theme.base")
    return kind == "dark"


# -- presets -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Preset:
    id: str
    title: str
    text: str
    note: str
    src_text: str | None = None
    answer: str | None = None
    query_index: int | None = None
    source_index: int | None = None


GENERIC = [
    Preset("cat-mat", "The cat and the mat", "The cat sat on the mat because the mat was warm.",
           "a plain sentence: look for heads that attend to the previous token or to the first token"),
    Preset("repeat", "A repeated phrase", "red fox jumps. red fox jumps. red fox",
           "the second copy can look back at the first one (induction) — trained models only"),
    Preset("markup", "Markup stays text", "<b>bold</b> & <i>tags</i> are just tokens",
           "tags and ampersands are shown as text, never rendered"),
]
GENERIC_ENCDEC = [
    Preset("copy-src", "Copy a sentence", "the cat", "the decoder's cross-attention reads the source sentence",
           src_text="the cat sat on the mat ."),
]
GENERIC_ENCODER = [
    Preset("minilm-it", "What does 'it' refer to?", "The animal didn't cross the street because it was too tired.",
           "look for a head where 'it' attends to 'animal'"),
    *GENERIC[::2],
]


def presets(model_name: str) -> list[Preset]:
    """Lecture samples for the bundled models (sample_texts/lecture.json), generic texts otherwise."""
    if model_name.startswith("lecture-"):
        try:
            from model.lecture.samples import load_samples

            got = [Preset(s.id, s.title, s.text, s.note, s.src_text, s.answer, s.query_index, s.source_index)
                   for s in load_samples(model_name)]
            if got:
                return got
        except Exception as e:  # noqa: BLE001 — samples are optional; fall back to generic texts
            log.warning("no lecture samples: %s", e)
    if model_name.endswith("encdec"):
        return GENERIC_ENCDEC
    if model_name == "minilm" or model_name.endswith("encoder"):
        return GENERIC_ENCODER
    return GENERIC


# -- the inputs every page reads ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Inputs:
    model: str
    text: str
    src: str | None
    backend: str
    preset: Preset | None
    arch: str

    def capture(self, mask: tuple = ()):
        return state.capture(self.model, self.text, self.src, self.backend, mask)


def _on_model_change() -> None:
    """A new model: start from its first preset (unless the user typed their own text)."""
    ss = st.session_state
    name = ss.get("model")
    if name == FOLDER:
        return
    reset_positions()
    if ss.get("preset", "custom") != "custom" or not ss.get("text"):
        _apply_preset(name, None)


def _apply_preset(name: str, pid: str | None) -> None:
    ss = st.session_state
    ps = presets(name)
    p = next((p for p in ps if p.id == pid), ps[0] if ps else None)
    if p is None:
        return
    ss["preset"], ss["text"] = p.id, p.text
    ss["src"] = p.src_text or ss.get("src") or ""
    _kept().update(preset=p.id, text=p.text, src=ss["src"])


def _on_preset_change() -> None:
    ss = st.session_state
    reset_positions()
    if ss.get("preset") != "custom":
        _apply_preset(_model_name(), ss.get("preset"))


def _on_text_change() -> None:
    ss = st.session_state
    reset_positions()
    p = next((p for p in presets(_model_name()) if p.id == ss.get("preset")), None)
    if p is None or ss.get("text") != p.text or (p.src_text and ss.get("src") != p.src_text):
        ss["preset"] = "custom"


def _model_name() -> str:
    ss = st.session_state
    if ss.get("model") == FOLDER:
        return (ss.get("folder") or "").strip()
    return ss.get("model") or state.default_model()


def _seed_inputs(choices: list[str]) -> None:
    """First run of a session (or a bookmark): model, preset and text from the URL, else defaults."""
    ss = st.session_state
    for k in ("model", "folder", "preset", "text", "src"):
        if k in ss:
            ss[k] = ss[k]  # re-assign: keeps the value when the widget is drawn by another page
    q = st.query_params if url_active() else {}
    if "model" not in ss:
        raw = q.get("model")
        kept = _kept().get("model")
        if raw and raw not in choices:
            ss["model"], ss["folder"] = FOLDER, raw
        else:
            ss["model"] = raw or kept or state.default_model()
            if ss["model"] not in choices + [FOLDER]:
                ss["model"] = state.default_model()
            if ss["model"] == FOLDER:
                ss["folder"] = _kept().get("folder", "")
    name = _model_name()
    if "text" not in ss:
        kept = _kept()
        if "text" in q or "preset" in q:
            ps = {p.id: p for p in presets(name)}
            if q.get("preset") in ps and "text" not in q:
                _apply_preset(name, q.get("preset"))
            else:
                ss["text"], ss["src"] = q.get("text", ""), q.get("src", "")
                ss["preset"] = "custom"
        elif "text" in kept:
            ss["text"], ss["src"], ss["preset"] = kept["text"], kept.get("src", ""), kept.get("preset", "custom")
        else:
            _apply_preset(name, None)
            if "text" not in ss:
                ss["text"], ss["src"], ss["preset"] = "", "", "custom"
    for k, d in (("preset", "custom"), ("src", "")):
        if k not in ss:
            ss[k] = _kept().get(k, d)


def inputs(where=None, *, expanded: bool = True) -> Inputs:
    """Model picker, preset, text (and source text for an encoder–decoder), backend. In the sidebar
    by default. The values are shared by every page and written to the URL."""
    where = where or st.sidebar
    ss = st.session_state
    choices = state.model_choices()
    _seed_inputs(choices)
    options = choices + [FOLDER]
    if ss.get("model") not in options:
        ss["model"] = state.default_model()
    where.selectbox("Model", options, key="model", on_change=_on_model_change,
                    help="Bundled lecture models, MiniLM (installed), seeded random models, or a local folder "
                         "(an attnlab or Hugging Face model folder with config.json and safetensors weights).")
    if ss["model"] == FOLDER:
        ss.setdefault("folder", _kept().get("folder", ""))
        where.text_input("Model folder", key="folder", placeholder="/path/to/model-folder",
                         on_change=_on_model_change)
    name = _model_name()
    _remember("model", ss["model"], name)
    if ss["model"] == FOLDER:
        _remember("folder", ss.get("folder", ""))
    if not name:
        where.info("Type the path of a model folder.")
        st.stop()
    ps = presets(name)
    ids = [p.id for p in ps] + ["custom"]
    titles = {p.id: p.title for p in ps} | {"custom": "(your own text)"}
    if ss.get("preset") not in ids:
        ss["preset"] = "custom"
    where.selectbox("Preset", ids, key="preset", format_func=lambda i: titles.get(i, i), on_change=_on_preset_change)
    arch = _arch(name)
    if arch == "encdec":
        ss.setdefault("src", "")
        where.text_area("Source text (encoder input)", key="src", height=80, on_change=_on_text_change)
        where.text_area("Target text (decoder input)", key="text", height=80, on_change=_on_text_change)
    else:
        where.text_area("Text", key="text", height=120 if where is not st.sidebar else 140, on_change=_on_text_change)
    backend = select("Backend", BACKENDS, "backend", "eager", where=where, show=not presenting(),
                     help="eager materialises the attention matrix; sdpa/flash run the fused kernel and the "
                          "app recomputes the pattern exactly from q and k.")
    text, src = ss.get("text", ""), (ss.get("src") or None) if arch == "encdec" else None
    _remember("text", text)
    _remember("src", ss.get("src", ""))
    _remember("preset", ss["preset"])
    url = st.session_state.setdefault(URL, {})
    if ss["preset"] != "custom":
        url["preset"] = ss["preset"]
    elif len(text) + len(src or "") <= URL_TEXT_LIMIT:
        url["text"] = text
        if src:
            url["src"] = src
    preset = next((p for p in ps if p.id == ss["preset"]), None)
    return Inputs(name, text, src, backend, preset, arch)


def _arch(name: str) -> str:
    try:
        return state.model_info(name)["arch"]
    except Exception:  # noqa: BLE001 — the page shows the loading error when it captures
        return "encdec" if name.endswith("encdec") else "decoder"


def default_query(cap, preset: Preset | None) -> int:
    """The row a lecturer asks about: the preset's query token, else the [MASK] or the last token."""
    t = len(cap.tokens)
    if preset is not None and preset.query_index is not None and 0 <= preset.query_index < t:
        return int(preset.query_index)
    if "[MASK]" in cap.tokens:
        return cap.tokens.index("[MASK]")
    return t - 1


def source_index(cap, preset: Preset | None) -> int | None:
    if preset is not None and preset.source_index is not None and 0 <= preset.source_index < len(cap.tokens):
        return int(preset.source_index)
    return None


def token_select(label: str, tokens, key: str, default: int, *, where=None, show: bool = True, help=None) -> int:
    """Pick a token position; options show 'index · token'."""
    opts = list(range(len(tokens)))
    return select(label, opts, key, min(max(default, 0), len(opts) - 1), where=where, show=show, help=help,
                  format_func=lambda i: f"{i} · {tokens[i]}")


# -- page frame --------------------------------------------------------------------------------------------
PRESENT_CSS = """<style>
html { font-size: 19px; }
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.15rem; }
h1 { font-size: 2.6rem !important; }
</style>"""


@contextmanager
def page(title: str, question: str, *, icon: str = "") -> Iterator[None]:
    """The frame of every page: title, the lecturer's question, presentation mode and image-export
    format in the sidebar, URL sync at the end, and any error shown as a message."""
    st.session_state[URL] = {}
    present = toggle("Presentation mode", "present", False, where=st.sidebar,
                     help="Large fonts and fewer controls, for a projector.")
    select("Chart download format", ("png", "svg"), "img", "png", where=st.sidebar, show=not present,
           help="What the camera icon in each chart's toolbar saves.")
    if present:
        st.html(PRESENT_CSS)
    st.title(f"{icon} {title}".strip())
    st.markdown(f"*{question}*")
    try:
        yield
    except Exception as e:  # noqa: BLE001 — no traceback ever reaches the page
        show_error(e)
    finally:
        sync_url()


def sync_url() -> None:
    st.session_state["_url_done"] = True
    want = {k: str(v) for k, v in st.session_state.get(URL, {}).items()}
    if dict(st.query_params) != want:
        st.query_params.from_dict(want)


def options(label: str = "Options", expanded: bool = True):
    """A container for a page's options (collapsed in presentation mode)."""
    return st.expander(label, expanded=expanded and not presenting())


def chart(fig, key: str | None = None, name: str = "attnlab"):
    """st.plotly_chart with the toolbar's download set to PNG or SVG (sidebar choice)."""
    fmt = _kept().get("img", "png")
    cfg = {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "filename": name, "scale": 2}}
    return st.plotly_chart(fig, key=None if key is None else f"fig-{key}", config=cfg, theme="streamlit")


# -- downloads ---------------------------------------------------------------------------------------------
def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return np.where(np.isfinite(o), o, None).tolist() if o.dtype.kind == "f" else o.tolist()
    if isinstance(o, (np.floating,)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, float):
        return o if np.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o


def downloads(name: str, *, csv=None, npz: dict | None = None, json_obj=None, where=None) -> None:
    """CSV / NPZ / JSON download buttons for the numbers on the page. The files are built only when a
    button is clicked (deferred data), so a rerun costs nothing; a click does not rerun the page."""
    where = where or st
    cols = where.columns(3)
    if csv is not None:
        def csv_data(c=csv):
            return c.to_csv(index=False) if hasattr(c, "to_csv") else c

        cols[0].download_button("⬇ CSV", csv_data, f"{name}.csv", "text/csv", on_click="ignore",
                                key=f"dl-csv-{name}")
    if npz is not None:
        cols[1].download_button("⬇ NPZ", lambda a=npz: _npz_bytes(a), f"{name}.npz", "application/octet-stream",
                                on_click="ignore", key=f"dl-npz-{name}")
    if json_obj is not None:
        cols[2].download_button("⬇ JSON", lambda o=json_obj: json.dumps(_jsonable(o), indent=1, allow_nan=False),
                                f"{name}.json", "application/json", on_click="ignore", key=f"dl-json-{name}")


def matrix_csv(m, q_tokens, k_tokens) -> str:
    """A [q, k] matrix as CSV with token labels (row and column headers 'index:token')."""
    import pandas as pd

    m = np.asarray(m)
    df = pd.DataFrame(m, index=[f"{i}:{t}" for i, t in enumerate(q_tokens[: m.shape[0]])],
                      columns=[f"{j}:{t}" for j, t in enumerate(k_tokens[: m.shape[1]])])
    return df.to_csv(index_label="query\\key")


# -- token strip -------------------------------------------------------------------------------------------
def token_strip(tokens, weights=None, *, query: int | None = None, source: int | None = None,
                label: str | None = None, where=None, exclude_query: bool = True) -> None:
    """Tokens as escaped HTML chips, shaded by `weights` (scaled to their max over the other tokens
    than the query); the query token is outlined, the ground-truth source underlined. Tokens are
    never rendered as markup."""
    where = where or st
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    others = w if w is None or query is None or not exclude_query or len(w) < 2 else np.delete(w, query)
    top = float(np.nanmax(others)) if w is not None and others.size and np.nanmax(others) > 0 else 1.0
    chips = []
    for i, t in enumerate(tokens):
        a = 0.0 if w is None else float(np.clip(w[i] / top, 0, 1))
        style = [f"background: rgba(31,119,180,{0.08 + 0.85 * a:.3f})" if w is not None else
                 "background: rgba(128,128,128,0.12)"]
        if a > 0.55:
            style.append("color: #fff")
        if i == query:
            style.append("outline: 3px solid #ff7f0e")
        if i == source:
            style.append("text-decoration: underline 3px #d62728")
        tip = f"{i}: {t}" + ("" if w is None else f" — {w[i]:.4f}")
        chips.append(f'<span class="tok" title="{html.escape(tip)}" style="{"; ".join(style)}">'
                     f'<sub>{i}</sub>{html.escape(str(t))}</span>')
    head = f'<div class="cap">{html.escape(label)}</div>' if label else ""
    where.html(
        "<style>.strip{line-height:2.3;font-family:ui-monospace,monospace;}"
        ".strip .tok{padding:2px 6px;margin:2px;border-radius:6px;white-space:pre;display:inline-block;}"
        ".strip sub{opacity:.55;font-size:.65em;margin-right:2px}.cap{font-size:.9em;opacity:.75}</style>"
        f'<div class="strip">{head}{"".join(chips)}</div>')


def predictions_table(tokens: list[str], probs) -> None:
    import pandas as pd

    st.dataframe(pd.DataFrame({"token": tokens, "probability": np.asarray(probs, dtype=float)}),
                 hide_index=True, column_config={"probability": st.column_config.ProgressColumn(
                     "probability", min_value=0.0, max_value=1.0, format="%.3f")})
