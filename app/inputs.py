"""The inputs every page reads: the model (bundled, random or a local folder), the preset, the text (and the
source text of an encoder–decoder) and the backend, drawn in the sidebar and shared by every page through the
URL; `require` for a page that needs a capability of the model (it says so, or runs its own model and the session
keeps its choice); `lacks` for one section of a page."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from attnlab.app import hub_access, state
from attnlab.app.frame import presenting
from attnlab.app.presets import Preset, presets
from attnlab.app.url_state import URL, URL_DONE, kept, remember, reset_positions, select, url_active
from attnlab.model.capabilities import Capabilities
from attnlab.model.config import BACKENDS
from attnlab.model.families import FAMILIES
from attnlab.model.inputs import InputError
from attnlab.model.memory import fmt_gb
from attnlab.model.registry import bundled_names, default_model, model_choices

FOLDER = "local folder…"
URL_TEXT_LIMIT = 1500  # longer custom texts are not put in the URL


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


# -- callbacks: a new model, preset or text ------------------------------------------------------------------
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
    kept().update(preset=p.id, text=p.text, src=ss["src"])


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
    return ss.get("model") or default_model()


def _seed_inputs(choices: list[str]) -> None:
    """First run of a session (or a bookmark): model, preset and text from the URL, else defaults. After Back
    or Forward (the URL changed under the session) the URL's model, preset and text win over the session's."""
    ss = st.session_state
    for k in ("model", "folder", "preset", "text", "src"):
        if k in ss:
            ss[k] = ss[k]  # re-assign: keeps the value when the widget is drawn by another page
    q = st.query_params if url_active() else {}
    back = bool(q) and ss.get(URL_DONE, False)  # a later run seeded by the URL: the browser went Back/Forward
    if back and q.get("model") and q.get("model") != (ss.get("folder") if ss.get("model") == FOLDER else ss.get("model")):
        ss.pop("model", None)
    if back and any(k in q and q.get(k) != ss.get(k) for k in ("preset", "text", "src")):
        ss.pop("text", None)
    if "model" not in ss:
        raw = q.get("model")
        before = kept().get("model")
        if raw and raw not in choices:
            ss["model"], ss["folder"] = FOLDER, raw
        else:
            ss["model"] = raw or before or default_model()
            if ss["model"] not in choices + [FOLDER]:
                ss["model"] = default_model()
            if ss["model"] == FOLDER:
                ss["folder"] = kept().get("folder", "")
    name = _model_name()
    if "text" not in ss:
        before = kept()
        if "text" in q or "preset" in q:
            ps = {p.id: p for p in presets(name)}
            if q.get("preset") in ps and "text" not in q:
                _apply_preset(name, q.get("preset"))
            else:
                ss["text"], ss["src"] = q.get("text", ""), q.get("src", "")
                ss["preset"] = "custom"
        elif "text" in before:
            ss["text"], ss["src"], ss["preset"] = before["text"], before.get("src", ""), before.get("preset", "custom")
        else:
            _apply_preset(name, None)
            if "text" not in ss:
                ss["text"], ss["src"], ss["preset"] = "", "", "custom"
    for k, d in (("preset", "custom"), ("src", "")):
        if k not in ss:
            ss[k] = kept().get(k, d)


# -- the widgets ---------------------------------------------------------------------------------------------
def inputs(where=None) -> Inputs:
    """Model picker, preset, text (and source text for an encoder–decoder), backend. In the sidebar
    by default. The values are shared by every page and written to the URL."""
    where = where or st.sidebar
    ss = st.session_state
    choices = model_choices()
    _seed_inputs(choices)
    options = choices + [FOLDER]
    if ss.get("model") not in options:
        ss["model"] = default_model()
    where.selectbox("Model", options, key="model", on_change=_on_model_change,
                    help="Bundled lecture models, MiniLM (installed), seeded random models, models in the local "
                         "Hugging Face cache, or a local folder (an attnlab or Hugging Face model folder with "
                         "config.json and safetensors weights) or a hub id (downloaded when this server may).")
    if ss["model"] == FOLDER:
        ss.setdefault("folder", kept().get("folder", ""))
        where.text_input("Model folder or hub id", key="folder", placeholder="/path/to/model-folder or org/name",
                         on_change=_on_model_change)
    name = _model_name()
    remember("model", ss["model"], name)
    if ss["model"] == FOLDER:
        remember("folder", ss.get("folder", ""))
    if not name:
        where.info("Type the path of a model folder, or a hub id.")
        st.stop()
    if hub_access.needs_download(name):
        _download(name, where)
    ps = presets(name)
    ids = [p.id for p in ps] + ["custom"]
    titles = {p.id: p.title for p in ps} | {"custom": "(your own text)"}
    if ss.get("preset") not in ids:
        ss["preset"] = "custom"
    where.selectbox("Preset", ids, key="preset", format_func=lambda i: titles.get(i, i), on_change=_on_preset_change)
    info = _info(name)
    if info:
        where.caption(f"Runs as: **{info.get('mode', 'converted')}**" + (f" ({info['family']})" if info.get("family")
                                                                          and info["family"] != "attnlab" else ""),
                      help="converted: our own hooked model (q, k, backends, the KV cache, interventions). "
                           "transformers view: transformers runs a family we do not convert; attention weights only.")
    arch = info.get("arch", "")
    if _can(info, "reads_source", False):
        ss.setdefault("src", "")
        where.text_area("Source text (encoder input)", key="src", height=80, on_change=_on_text_change)
        where.text_area("Target text (decoder input)", key="text", height=80, on_change=_on_text_change)
    else:
        where.text_area("Text", key="text", height=120 if where is not st.sidebar else 140, on_change=_on_text_change)
    backend = select("Backend", BACKENDS, "backend", "eager", where=where, show=not presenting(),
                     help="eager materialises the attention matrix; sdpa/flash run the fused kernel and the "
                          "app recomputes the pattern exactly from q and k.")
    text, src = ss.get("text", ""), (ss.get("src") or None) if _can(info, "reads_source", False) else None
    remember("text", text)
    remember("src", ss.get("src", ""))
    remember("preset", ss["preset"])
    url = st.session_state.setdefault(URL, {})
    if ss["preset"] != "custom":
        url["preset"] = ss["preset"]
    elif len(text) + len(src or "") <= URL_TEXT_LIMIT:
        url["text"] = text
        if src:
            url["src"] = src
    preset = next((p for p in ps if p.id == ss["preset"]), None)
    return Inputs(name, text, src, backend, preset, arch)


def _download(name: str, where) -> None:
    """A hub id typed into the model box: download it with a progress bar when this server may (app/state.py
    hub_refusal), else say how an administrator adds a model; the page stops when nothing can be loaded."""
    refusal = hub_access.hub_refusal()
    if refusal:
        where.info(refusal, icon=":material/cloud_off:")
        st.stop()
    bar = where.progress(0.0, text=f"Downloading {name} from the Hugging Face hub…")

    def step(i: int, n: int, file: str, size: int) -> None:
        bar.progress(i / n, text=f"Downloading {name}: {file} ({fmt_gb(size)}), file {i + 1} of {n}")

    try:
        hub_access.pull(name, on_file=step)
    except InputError as e:
        bar.empty()
        where.error(str(e))
        st.stop()
    bar.empty()


def _info(name: str) -> dict:
    """The model's describe() (its kind, mode and capabilities), or {} when it does not load (the page shows why)."""
    try:
        return state.model_info(name)
    except Exception:  # noqa: BLE001 — the page shows the loading error when it captures
        return {}


# -- a page that needs a capability of the model -----------------------------------------------------------------
KINDS = {"decoder": "a decoder", "encoder": "an encoder", "encdec": "an encoder–decoder"}
# what only a converted family gives (a transformers view returns attention weights and logits, nothing else)
CONVERTED_ONLY = Capabilities.check(("has_qk", "has_cache", "generates", "interventions", "masks", "internals",
                                     "relevance"))


def _can(info: dict, cap: str, unknown: bool = True) -> bool:
    """Capability `cap` of a model's describe(); `unknown` when it did not load (the page shows why)."""
    can = info.get("can")
    return unknown if can is None else getattr(can, cap)


def converted_families() -> str:
    return ", ".join(FAMILIES)


def needs_converted(name: str, why: str) -> str:
    """The one line a page (or a section) shows for a transformers view that cannot do what it needs."""
    return (f"This {why}: it needs a converted family ({converted_families()}); **{name}** runs as a transformers "
            "view, which gives attention weights only.")


def lacks(name: str, cap: str, why: str) -> bool:
    """True (and the one line, as a caption) when the model lacks capability `cap` for a section of a page."""
    (cap,) = Capabilities.check(cap)
    info = _info(name)
    if _can(info, cap):
        return False
    st.caption(needs_converted(name, why) if not _can(info, "converted") else f"{name} cannot: this {why}.")
    return True


def default_for(archs: tuple[str, ...]) -> str:
    """The bundled lecture model of the first wanted kind, else the matching random model."""
    for a in archs:
        if f"lecture-{a}" in bundled_names():
            return f"lecture-{a}"
    return f"random-{archs[0]}"


def require(caps: tuple[str, ...], why: str, kinds: tuple[str, ...] = ("decoder",)) -> Inputs:
    """inputs() when the session's model has every capability in `caps` (model.describe()["can"]). A
    transformers view that lacks only what a converted family gives gets one line naming those families, and
    the page stops. Otherwise this page alone runs the default model of `kinds` (a bundled lecture model when
    present) on its first preset, and says so: the session keeps its model (the sidebar, the URL and every
    other page still use it)."""
    caps = Capabilities.check(caps)
    inp = inputs()
    here = _info(inp.model)
    missing = [c for c in caps if not _can(here, c)]  # nothing known (it did not load): the page says why
    if not missing:
        return inp
    if not _can(here, "converted") and all(c in CONVERTED_ONLY for c in missing):
        st.info(needs_converted(inp.model, f"page {why}"), icon=":material/info:")
        st.stop()
    own = default_for(kinds)
    ps = presets(own)
    p = ps[0] if ps else None
    info = _info(own)
    want = " or ".join(KINDS[a] for a in kinds)
    st.info(f"This page {why}; the session's model **{inp.model}** is {KINDS.get(inp.arch, inp.arch)}, so this "
            f"page alone uses **{own}**" + (f" on its sample “{p.title}”" if p else "") + f". The other pages keep "
            f"**{inp.model}**; to use your own text here, pick {want} in the sidebar.", icon=":material/swap_horiz:")
    reads_source = _can(info, "reads_source", False)
    return Inputs(own, p.text if p else "", (p.src_text if p else None) if reads_source else None,
                  inp.backend, p, info.get("arch", ""))


ARCH_CAPS = {k: Capabilities.check(v) for k, v in {("decoder",): ("next_token",), ("encdec",): ("reads_source",),
                                                   ("decoder", "encdec"): ("generates",)}.items()}


def require_arch(archs: tuple[str, ...], why: str) -> Inputs:
    """require() by the kinds of model a page was written for (the capability each kind stands for)."""
    return require(ARCH_CAPS.get(tuple(archs), ()), why, archs)
