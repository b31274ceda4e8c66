"""Issue 20's rough edges: head selectors for 12 heads, Back through URL state, Material icons, navigation
sections with stable URL paths, the Explore strip following the preset's note, index ticks when presenting."""

import ast
from pathlib import Path
from unittest import mock

import pytest
import streamlit as st
from attnlab.app.frame import title_icon
from attnlab.app.navigation import APP_ICON, PAGES, SECTIONS, icon_of, sections
from attnlab.app.presets import note_head, presets
from attnlab.app.url_state import HISTORY_JS
from streamlit.testing.v1 import AppTest

from .conftest import ENTRY, arr, ok, open_page, titled, widget

ROOT = Path(__file__).resolve().parents[2]
MATERIAL = ":material/"


def _material(icon: str) -> bool:
    return icon.startswith(MATERIAL) and icon.endswith(":") and icon[len(MATERIAL):-1].replace("_", "").isalnum()


@pytest.mark.parametrize("page", ["heatmaps", "masks", "scores"])
def test_every_head_of_a_12_head_model_is_selectable(page):
    at = open_page(page, model="minilm", text="the cat sat on the mat")
    ok(at)
    head = widget(at, "head")
    assert head in at.slider and (head.min, head.max) == (0, 11)  # a slider: no button group to overflow
    for h in (11, 6, 0):
        widget(at, "head").set_value(h).run()
        ok(at)
        assert widget(at, "head").value == h and at.query_params["head"] == str(h)


def test_a_few_heads_stay_one_button_each():
    at = open_page("masks", model="random-decoder", text="hello world")
    ok(at)
    assert widget(at, "head") in at.button_group and len(widget(at, "head").options) == 4


def test_back_returns_the_previous_head():
    at = open_page("heatmaps", model="random-decoder", text="hello world", head=2)
    widget(at, "head").set_value(3).run()
    assert at.query_params["head"] == "3"
    at.query_params["head"] = "2"  # Back: the browser reruns the page with the previous URL
    at.run()
    ok(at)
    assert widget(at, "head").value == 2 and at.query_params["head"] == "2"
    assert titled(at, "layer 1, head 2")
    widget(at, "layer").set_value(0).run()  # then a widget again wins over the (unchanged) URL
    assert widget(at, "head").value == 2 and at.query_params["layer"] == "0"


def test_back_returns_the_previous_text_and_model():
    at = open_page("heatmaps", model="random-decoder", text="hello world")
    at.text_area(key="text").set_value("a different text").run()
    assert at.query_params["text"] == "a different text"
    at.query_params["text"] = "hello world"  # Back over the text change
    at.run()
    ok(at)
    assert at.session_state["text"] == "hello world" and at.session_state["preset"] == "custom"
    at.selectbox(key="model").set_value("random-encoder").run()
    assert at.query_params["model"] == "random-encoder"
    at.query_params["model"] = "random-decoder"  # Back over the model change
    at.run()
    ok(at)
    assert at.session_state["model"] == "random-decoder" and at.query_params["model"] == "random-decoder"


def test_icons_are_material_names_never_emoji():
    assert Path(APP_ICON).is_file() and APP_ICON.endswith(".png")  # the favicon: a file the server sends
    assert all(_material(p[3]) for p in PAGES)
    calls = []
    for f in sorted((ROOT / "pages").glob("[!_]*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "page":
                title = node.args[0].value
                icon = next((k.value.value for k in node.keywords if k.arg == "icon"), "")
                calls.append((title, title_icon(title, icon)))
    assert len(calls) == len(PAGES)  # every page script draws its frame
    assert all(icon == "" or _material(icon) for _, icon in calls), calls
    assert dict(calls)["Generate"] == icon_of("Generate") == ":material/edit_note:"  # an emoji replaced
    src = (ROOT / "app" / "frame.py").read_text() + (ROOT / "app" / "main.py").read_text()
    assert not [c for c in src if ord(c) >= 0x2190 and c not in "—–→−×…≤≥√·"], "emoji in frame/main"


def test_navigation_sections_keep_every_url_path():
    published = {"", "heatmaps", "masks", "scores", "rollout", "heads", "kv-cache", "backends", "step-by-step",
                 "cross-attention", "positions", "generate", "long-inputs", "block", "permutation", "routing", "vision",
                 "logit-lens", "patching", "tour"}
    paths = [p[2] for p in PAGES]  # bookmarks keep working: every published path stays; new pages need no edit here
    assert published <= set(paths) and len(set(paths)) == len(paths)
    assert {f for f, *_ in PAGES} == {f.name for f in (ROOT / "pages").glob("[!_]*.py")}  # one entry per page script
    grouped = [e for entries in sections().values() for e in entries]
    assert sorted(grouped) == sorted(PAGES) and len(grouped) == len(PAGES)  # each page in one section
    assert len(SECTIONS) >= 3 and all(len(v) <= 6 for v in SECTIONS.values())
    assert "Block and positions" in SECTIONS
    seen = []
    real = st.navigation
    with mock.patch.object(st, "navigation", lambda pages, **kw: seen.append((pages, kw)) or real(pages, **kw)):
        at = AppTest.from_file(ENTRY, default_timeout=120).run()
    ok(at)
    (pages, kw), = seen
    assert kw["expanded"] is True and list(pages) == list(SECTIONS)  # sections, never "View 3 more"
    assert {s: [p.url_path for p in ps] for s, ps in pages.items()} == SECTIONS
    assert sorted(v["url_pathname"] for v in at._registered_pages.values()) == sorted(p[2] for p in PAGES)
    scripts = [h.proto.body for h in at.get("html") if "__attnlabHistory" in h.proto.body]
    assert scripts == [HISTORY_JS] and "replaceState" in HISTORY_JS  # the Back fix, once per run


def test_explore_strip_follows_the_presets_note():
    p = next(p for p in presets("lecture-decoder") if p.id == "decoder-induction-1")
    assert note_head(p) == (3, 2)
    at = open_page(None, model="lecture-decoder", preset=p.id)
    ok(at)
    assert widget(at, "strip_layer").value == 3 and at.selectbox(key="strip_head").value == 2
    strip = [h.proto.body for h in at.get("html") if 'class="strip"' in h.proto.body][0]
    assert "shaded by layer 3, head 2 (the head the note names)" in strip
    assert at.sidebar.selectbox(key="model").value == "lecture-decoder"  # inputs in the sidebar, as everywhere
    at.text_area(key="text").set_value("garo is seven . garo has a cat .").run()  # own text, no head named: last layer
    assert widget(at, "strip_layer").value == len(widget(at, "strip_layer").options) - 1
    assert at.selectbox(key="strip_head").value == "mean"


def test_presentation_close_up_has_index_ticks():
    at = open_page("heatmaps", model="random-decoder", text="the cat sat", present=1, layer=0, head=1)
    ok(at)
    fig = titled(at, "layer 0, head 1")
    for axis in ("xaxis", "yaxis"):  # each label starts with its position (the labels kept where they fit)
        ax = fig["layout"][axis]
        tokens = [t.strip() for t in ax["ticktext"]]
        assert tokens[0].startswith("0 ") and len(tokens) >= 2
        assert all(t.split(" ", 1)[0] == str(int(v)) for t, v in zip(tokens, arr(ax["tickvals"]))), tokens
    assert fig["layout"]["font"]["size"] == 18
    at.toggle(key="present").set_value(False).run()
    plain = titled(at, "layer 0, head 1")
    assert not plain["layout"]["xaxis"]["ticktext"][0].startswith("0 ")


def test_long_inputs_keeps_its_model_and_text_in_the_sidebar_like_every_page():
    at = open_page("long_input")
    ok(at)
    assert [t.key for t in at.sidebar.text_area] == ["long_text"]
    keys = {w.key for kind in ("selectbox", "radio", "button_group") for w in at.sidebar.get(kind) if w.key}
    assert "long_model" in keys
    assert not [t for t in at.main.text_area if t.key == "long_text"]
    for name in ("explore", "heatmaps", "rollout"):
        side = open_page(name, model="random-decoder", text="hello").sidebar
        assert [t.key for t in side.text_area] == ["text"]  # the shared text box, same place on every page
