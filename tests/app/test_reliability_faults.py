"""Reliability (issue 9): faults typed into the model picker give one exact message each and the default model
still serves; startup works with every non-loopback socket blocked."""

from __future__ import annotations

import errno
import ipaddress
import json
import shutil
import socket
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from attnlab.app import state
from attnlab.model.checkpoint import save_folder
from attnlab.model.config import ModelConfig
from attnlab.model.families import supported_families
from attnlab.model.lecture.corpus import vocabulary
from attnlab.model.registry import BUNDLED_DIR
from attnlab.model.transformer import build_model

from tests.app.conftest import open_page, specs, titled, z_of
from tests.app.reliability import (
    CHANGE,
    DEFAULT,
    FIX,
    FOLDER,
    LOADED,
    errors,
    no_exception,
    report,
    serves_default,
    strip_bodies,
    strip_tokens,
)

# -- 1. faults typed into the model picker ----------------------------------------------------------------
TINY = ModelConfig(arch="decoder", vocab_size=len(vocabulary()), d_model=32, n_heads=2, n_layers=1, max_len=96,
                   positional="rope")


def _good(folder: Path) -> Path:
    """A small valid attnlab folder: random weights, the lecture tokenizer."""
    save_folder(build_model(TINY), TINY, folder, specials={"bos": "[BOS]", "eos": "[EOS]", "pad": "[PAD]",
                                                           "mask": "[MASK]"})
    shutil.copy(BUNDLED_DIR / "lecture-decoder" / "tokenizer.json", folder / "tokenizer.json")
    return folder


def _edit_config(folder: Path, **changes) -> None:
    meta = json.loads((folder / "config.json").read_text())
    meta["attnlab"].update(changes)
    (folder / "config.json").write_text(json.dumps(meta))


def _bytes(folder: Path, fn) -> None:
    p = folder / "model.safetensors"
    p.write_bytes(fn(p.read_bytes()))


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """An allowed model root with one folder per fault, and a valid folder outside it."""
    base = tmp_path_factory.mktemp("models")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    _good(root / "good")
    _good(outside)
    _bytes(_good(root / "corrupt"), lambda b: b"\xff" * 64 + b[64:])
    _bytes(_good(root / "truncated"), lambda b: b[: len(b) // 2])
    (_good(root / "bad-json") / "config.json").write_text("{not json")
    _edit_config(_good(root / "bad-config"), n_heads=3)
    (_good(root / "no-attnlab") / "config.json").write_text(json.dumps({"hidden_size": 32}))
    _edit_config(_good(root / "shapes"), vocab_size=200)
    small = replace(TINY, vocab_size=200)  # a model of a smaller vocabulary beside the lecture tokenizer
    save_folder(build_model(small), small, root / "tokenizer", specials={"bos": "[BOS]", "eos": "[EOS]", "pad": "[PAD]"})
    shutil.copy(BUNDLED_DIR / "lecture-decoder" / "tokenizer.json", root / "tokenizer" / "tokenizer.json")
    _edit_config(_good(root / "layers"), n_layers=2)
    (_good(root / "no-tokenizer") / "tokenizer.json").unlink()
    pickle_only = root / "pickle-only"
    pickle_only.mkdir()
    (pickle_only / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (pickle_only / "pytorch_model.bin").write_bytes(b"not opened")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    return root.resolve(), outside.resolve()


def _faults(root: Path, outside: Path) -> dict[str, tuple[str, str] | str]:
    """fault -> the exact message, or (prefix, suffix) around the safetensors library's own detail."""
    roots = f"{root}"
    out = f"is outside the allowed model folders ({roots}); ask the server's owner to add it to ATTNLAB_MODEL_ROOTS"
    st_bad = f"{LOADED}{root}/{{}}/model.safetensors is not a readable safetensors file (corrupt or truncated?): "
    return {
        "corrupt": (st_bad.format("corrupt"), FIX),
        "truncated": (st_bad.format("truncated"), FIX),
        "bad-json": f"{LOADED}{root}/bad-json/config.json is not valid JSON (Expecting property name enclosed in "
                    f"double quotes){FIX}",
        "bad-config": f"{LOADED}{root}/bad-config/config.json: d_model=32 is not divisible by n_heads=3{FIX}",
        "no-attnlab": f"{LOADED}{root}/no-attnlab: model_type None is not supported; supported families: "
                      f"{supported_families()}{FIX}",
        "shapes": f"{LOADED}{root}/shapes: embed.tok.weight has shape ({TINY.vocab_size}, 32), the config needs (200, 32)"
                  f"{FIX}",
        "tokenizer": f"{LOADED}{root}/tokenizer/tokenizer.json has {TINY.vocab_size} tokens but the model's vocabulary "
                     f"holds 200: the tokenizer belongs to another model{FIX}",
        "layers": f"{LOADED}{root}/layers: weights do not match the config (missing ['blocks.1.attn.qkv.weight', "
                  f"'blocks.1.attn.qkv.bias', 'blocks.1.attn.out.weight'], unexpected []){FIX}",
        "no-tokenizer": f"{LOADED}{root}/no-tokenizer has no tokenizer.json{FIX}",
        "pickle-only": f"{LOADED}{root}/pickle-only has only pytorch_model.bin, a pickle file; it is not loaded "
                       "because unpickling can run arbitrary code. Use model.safetensors instead: ",
        "escape": f"{root}/escape {out}{CHANGE}",  # a symlink inside the root that points outside it
        "outside": f"{outside} {out}{CHANGE}",
        "dotdot": f"{root}/../outside {out}{CHANGE}",
    }


def _path(root: Path, outside: Path, fault: str) -> str:
    return {"outside": str(outside), "dotdot": f"{root}/../outside"}.get(fault, f"{root}/{fault}")


def _matches(got: str, want) -> bool:
    if isinstance(want, tuple):
        return got.startswith(want[0]) and got.endswith(want[1]) and "\n" not in got
    return got == want or (want.endswith((" (", ": ")) and got.startswith(want))


FAULTS = ["corrupt", "truncated", "bad-json", "bad-config", "no-attnlab", "shapes", "tokenizer", "layers", "no-tokenizer",
          "pickle-only", "escape", "outside", "dotdot"]


@pytest.fixture
def model_roots(roots, monkeypatch):
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(roots[0]))
    return roots


def test_a_valid_folder_inside_the_roots_loads(model_roots):
    """The baseline that makes the fault tests mean something: the same folder, unbroken, draws."""
    root, _ = model_roots
    at = open_page()
    at.selectbox(key="model").set_value(FOLDER).run()
    at.text_input(key="folder").set_value(str(root / "good")).run()
    no_exception(at)
    assert not errors(at), errors(at)
    z = z_of(titled(at, "Where does token")["data"][0])
    assert z.shape[0] == TINY.n_layers
    serves_default(at)


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_in_the_model_picker_is_one_clear_message(model_roots, fault):
    root, outside = model_roots
    want = _faults(root, outside)[fault]
    at = open_page()
    at.selectbox(key="model").set_value(FOLDER).run()
    assert any("Type the path of a model folder" in i.value for i in at.info)
    at.text_input(key="folder").set_value(_path(root, outside, fault)).run()
    no_exception(at)
    got = errors(at)
    assert len(got) == 1 and _matches(got[0], want), (got, want)
    assert "Traceback" not in got[0] and 'File "' not in got[0]
    assert not specs(at)  # nothing half-drawn from a broken model
    serves_default(at)  # the same session goes on with the default model


def test_a_fault_does_not_disturb_another_session(model_roots):
    """Two students: one types a corrupt folder, the other's page (already open) keeps working."""
    root, _ = model_roots
    other = open_page(None, model="random-decoder", text="my own text")
    at = open_page()
    at.selectbox(key="model").set_value(FOLDER).run()
    at.text_input(key="folder").set_value(str(root / "corrupt")).run()
    assert errors(at) and errors(at)[0].startswith(LOADED)
    other.run()
    no_exception(other)
    assert not errors(other)
    assert strip_tokens(other) == state.model("random-decoder").encode("my own text").tokens
    assert titled(other, "Where does token")


# -- 2. startup with no network at all --------------------------------------------------------------------
def _loopback(host) -> bool:
    if host in (None, "", "localhost", b"localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connect / name lookup to a non-loopback address fails (and is recorded)."""
    tried: list[tuple[str, object]] = []
    connect, connect_ex, getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def allowed(sock, address) -> bool:
        return sock.family == getattr(socket, "AF_UNIX", -1) or (isinstance(address, tuple) and _loopback(address[0]))

    def blocked_connect(self, address):
        if not allowed(self, address):
            tried.append(("connect", address))
            raise OSError(errno.ENETUNREACH, f"network blocked by the test: {address}")
        return connect(self, address)

    def blocked_connect_ex(self, address):
        if not allowed(self, address):
            tried.append(("connect_ex", address))
            return errno.ENETUNREACH
        return connect_ex(self, address)

    def blocked_getaddrinfo(host, *args, **kwargs):
        if not _loopback(host):
            tried.append(("getaddrinfo", host))
            raise socket.gaierror(socket.EAI_NONAME, f"network blocked by the test: {host}")
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", blocked_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", blocked_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", blocked_getaddrinfo)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # the app must not rely on them
        monkeypatch.delenv(var, raising=False)
    yield tried


def test_startup_with_sockets_blocked(no_network):
    import urllib.error
    import urllib.request

    with pytest.raises(OSError):  # the block is real
        socket.create_connection(("192.0.2.1", 80), timeout=1)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("https://huggingface.co", timeout=2)
    no_network.clear()
    state._load.clear()  # a fresh server: models load again, under the block
    state.model_info.clear()
    state.capture.clear()
    at = open_page()
    no_exception(at)
    assert not errors(at), errors(at)
    assert at.query_params["model"] == DEFAULT
    assert np.isfinite(z_of(titled(at, "Where does token")["data"][0])).any() and strip_bodies(at)
    at.selectbox(key="model").set_value("minilm").run()  # the Hugging Face loading path, offline too
    no_exception(at)
    assert not errors(at), errors(at)
    assert titled(at, "Where does token")
    report(no_network_connection_attempts=[f"{k} {a}" for k, a in no_network])
    assert no_network == [], no_network
