"""Hub ids typed into the app's model box, against a stand-in hub on a loopback port (no network): a server on
this machine downloads them (bounded, one at a time) and shows the heads; a public one says how an
administrator adds a model."""

from __future__ import annotations

import shutil

import pytest
from streamlit import config

from tests.app.conftest import ok, open_page, titled
from tests.view.fixtures import make_view_model
from tests.view.hub_standin import StandInHub

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    root = tmp_path_factory.mktemp("standin")
    view = make_view_model("gptj", tmp_path_factory.mktemp("src") / "gptj")
    shutil.copytree(view, root / "tinyview")
    (root / "acme" / "huge").mkdir(parents=True)
    shutil.copy(view / "config.json", root / "acme" / "huge" / "config.json")
    with open(root / "acme" / "huge" / "model.safetensors", "wb") as f:
        f.truncate(50 * 10**9)  # sparse: 50 GB listed, nothing on disk
    with StandInHub(root) as hub:
        yield hub


@pytest.fixture
def online(standin, tmp_path, monkeypatch):
    """HF_ENDPOINT at the stand-in, a fresh HF cache, offline switches off (huggingface_hub read them at import)."""
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_ENDPOINT", standin.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "ATTNLAB_ALLOW_HUB"):
        monkeypatch.delenv(var, raising=False)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "0")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    standin.requests.clear()
    address = config.get_option("server.address")
    yield standin
    config.set_option("server.address", address)


def fetched(hub, repo: str) -> int:
    return sum(n for (m, p), n in hub.requests.items() if m == "GET" and p.startswith(f"/{repo}/resolve/"))


def test_a_local_server_downloads_a_typed_hub_id_and_shows_its_heads(online):
    from attnlab.model.hf.cache import resolve_cached

    config.set_option("server.address", "127.0.0.1")
    at = open_page("heatmaps", model="tinyview", text=TEXT)
    ok(at)
    assert fetched(online, "tinyview") == 5 and resolve_cached("tinyview") is not None
    fig = titled(at, "self-attention — attention weights")
    assert fig["layout"]["meta"]["heads"] == 4
    assert "Runs as: **transformers view** (gptj)" in [c.value for c in at.sidebar.caption]


def test_a_public_server_says_how_an_administrator_adds_a_model(online):
    config.set_option("server.address", "0.0.0.0")
    at = open_page("heatmaps", model="tinyview", text=TEXT)
    assert not at.exception and not at.error
    (line,) = [i.value for i in at.sidebar.info]
    assert "does not download models" in line and "`attnlab pull ID`" in line and "--allow-hub" in line
    assert fetched(online, "tinyview") == 0


def test_no_hub_refuses_even_on_this_machine(online, monkeypatch):
    config.set_option("server.address", "127.0.0.1")
    monkeypatch.setenv("ATTNLAB_ALLOW_HUB", "0")  # attnlab app --no-hub (a class server behind a proxy)
    at = open_page(None, model="tinyview", text=TEXT)
    assert not at.exception and not at.error
    assert any("does not download models" in i.value for i in at.sidebar.info)
    assert fetched(online, "tinyview") == 0


def test_allow_hub_downloads_are_bounded(online, monkeypatch):
    config.set_option("server.address", "0.0.0.0")
    monkeypatch.setenv("ATTNLAB_ALLOW_HUB", "1")
    at = open_page("heatmaps", model="acme/huge", text=TEXT)
    assert not at.exception
    (err,) = [e.value for e in at.error]
    assert "acme/huge is 50.00 GB; this server downloads at most 4.00 GB" in err
    assert fetched(online, "acme/huge") == 0
