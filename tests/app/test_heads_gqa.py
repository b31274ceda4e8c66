"""Heads page on a grouped-query model (a tiny Llama folder: 4 query heads on 2 k/v heads): the table names each
head's k/v head, the maps name and separate the groups, the ablated head says whom it shares keys with."""

from __future__ import annotations

import pytest

from tests.app.conftest import ok, open_page, titled, z_of

pytest.importorskip("transformers")


def test_heads_page_shows_the_kv_groups(tmp_path, monkeypatch):
    from attnlab.app.inputs import FOLDER

    from tests.hf_fixtures import build

    folder = build("llama", "llama-gqa2-tied-theta", tmp_path)
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(tmp_path))

    def open_on(page, **params):
        at = open_page(page, **params)
        at.selectbox(key="model").set_value(FOLDER).run()
        at.text_input(key="folder").set_value(str(folder)).run()
        at.text_area(key="text").set_value("the cat sat on the mat").run()  # within the tiny model's 64 tokens
        ok(at)
        return at

    at = open_on("heads", head=3)  # the head switched off: 3
    table = at.dataframe[0].value
    n_layers = table["layer"].nunique()
    assert len(table) == 4 * n_layers
    assert list(table.sort_values(["layer", "head"])["kv_head"][:4]) == [0, 0, 1, 1]
    assert (table["kv_head"] == table["head"] // 2).all()

    fig = titled(at, f"{at.session_state['stat']} — ")
    assert fig["layout"]["meta"]["kv_group"] == 2
    assert fig["layout"]["xaxis"]["ticktext"] == ["head 0 · kv 0", "head 1 · kv 0", "head 2 · kv 1", "head 3 · kv 1"]
    lines = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert [s["x0"] for s in lines] == [1.5]  # one line, between the two groups
    assert z_of(fig["data"][0]).shape == (n_layers, 4)

    captions = " ".join(c.value for c in at.caption)
    assert "kv_head is the key/value head a query head shares" in captions
    assert at.session_state["head"] == 3
    assert "Head 3 shares k/v head 1 with heads 2–3" in captions

    at = open_on("masks")  # the per-head grid of the Masks page marks the groups too
    fig = titled(at, "max |Δ weight| per head")
    assert fig["layout"]["meta"]["kv_group"] == 2 and fig["layout"]["xaxis"]["ticktext"][2] == "head 2 · kv 1"


def test_multi_head_models_show_no_kv_column():
    at = open_page("heads", model="random-decoder", text="heads heads heads")
    ok(at)
    assert "kv_head" not in at.dataframe[0].value.columns
    assert not any("kv_head" in c.value for c in at.caption)
    assert "kv_group" not in (titled(at, "Change in p(")["layout"].get("meta") or {})
