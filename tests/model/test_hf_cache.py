"""model/hf/cache.py on a fake Hugging Face cache built in tmp_path: real tiny save_pretrained folders laid out
as snapshots/{rev}/ symlinks into ../../blobs/, an unconverted family (listed: it runs as a transformers view),
next to entries that must be skipped (a pickle-only entry, remote code, a dangling link, links escaping the root, odd names) — nothing downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from attnlab.model.hf import cache
from attnlab.model.hf.load import load_hf_folder
from safetensors.torch import load_file, save_file

from tests.hf_fixtures import build

REV_OLD, REV_NEW = "a" * 40, "b" * 40


def add_repo(root: Path, repo_id: str, files: dict[str, bytes | Path], rev: str = REV_NEW, ref: bool = True) -> Path:
    """Lay `files` (name → bytes or a file to copy) out as the hub cache does; returns the snapshot folder."""
    repo = root / cache.folder_name(repo_id)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        data = data.read_bytes() if isinstance(data, Path) else data
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snap / name).symlink_to(Path("..", "..", "blobs", digest))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return snap


def folder_files(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_file()}


def n_params(*files: Path) -> int:
    return sum(t.numel() for f in files for t in load_file(str(f)).values())


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """(root, outside, details): the fake cache and what the assertions need."""
    base = tmp_path_factory.mktemp("hf")
    root, outside = base / "hub", base / "outside"
    root.mkdir()
    outside.mkdir()
    llama = build("llama", "llama-mha-untied", base / "src")
    qwen = build("llama", "qwen2-mqa-bias", base / "src")
    # Qwen2 as two shards + an index, in a newer snapshot next to an older, incomplete one.
    state = load_file(str(qwen / "model.safetensors"))
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    sharded = base / "sharded"
    sharded.mkdir()
    for name, ks in shards.items():
        save_file({k: state[k].contiguous() for k in ks}, str(sharded / name))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: name for name, ks in shards.items() for k in ks}}))
    qwen_files = {**{k: v for k, v in folder_files(qwen).items() if k != "model.safetensors"},
                  **folder_files(sharded)}
    add_repo(root, "acme/qwen2-sharded", {"config.json": qwen / "config.json"}, rev=REV_OLD, ref=False)
    qsnap = add_repo(root, "acme/qwen2-sharded", qwen_files, rev=REV_NEW)
    lsnap = add_repo(root, "acme/tiny-llama", folder_files(llama))
    osnap = add_repo(root, "solo", folder_files(llama), rev=REV_OLD, ref=False)  # no org, no refs, one snapshot

    llama_cfg = json.loads((llama / "config.json").read_text())
    weights = (llama / "model.safetensors").read_bytes()
    add_repo(root, "acme/pegasus-tiny", {"config.json": json.dumps({"model_type": "pegasus"}).encode(),
                                     "model.safetensors": weights})
    add_repo(root, "acme/pickle-only", {"config.json": llama / "config.json", "pytorch_model.bin": b"\x80\x04junk"})
    add_repo(root, "acme/remote-code", {"config.json": json.dumps(llama_cfg | {"auto_map": {"x": "y"}}).encode(),
                                        "model.safetensors": weights})
    add_repo(root, "acme/bad-json", {"config.json": b"{not json", "model.safetensors": weights})
    add_repo(root, "acme/bad-index", {"config.json": llama / "config.json",
                                      "model.safetensors.index.json": json.dumps(
                                          {"weight_map": {"a": "../../../outside/x.safetensors"}}).encode()})
    dangling = add_repo(root, "acme/dangling", {"config.json": llama / "config.json"})
    (dangling / "model.safetensors").symlink_to(Path("..", "..", "blobs", "missing"))
    (outside / "model.safetensors").write_bytes(weights)
    (outside / "config.json").write_bytes((llama / "config.json").read_bytes())
    esc_w = add_repo(root, "acme/escape-weights", {"config.json": llama / "config.json"})
    (esc_w / "model.safetensors").symlink_to(outside / "model.safetensors")
    esc_c = add_repo(root, "acme/escape-config", {"model.safetensors": weights})
    (esc_c / "config.json").symlink_to(Path("..", "..", "..", "..", "outside", "config.json"))
    shutil.copytree(llama, outside / "snap")
    esc_s = root / cache.folder_name("acme/escape-snapshot") / "snapshots"
    esc_s.mkdir(parents=True)
    (esc_s / REV_NEW).symlink_to(outside / "snap", target_is_directory=True)
    add_repo(root, "acme/two-snaps", folder_files(llama), rev=REV_OLD, ref=False)
    add_repo(root, "acme/two-snaps", folder_files(llama), rev=REV_NEW, ref=False)
    (root / "models--a--b--c").mkdir()  # odd names and files
    (root / "datasets--acme--data").mkdir()
    (root / "version.txt").write_text("1")
    (root / "models--acme--a-file").write_text("not a folder")
    (root / "models--acme--empty").mkdir()
    return root, outside, {"llama": (llama, lsnap), "qwen": (qwen, qsnap), "solo": (llama, osnap)}


def test_lists_supported_entries_only_sorted(hub):
    root, _, _ = hub
    found = cache.list_cached(root)
    assert [r.repo_id for r in found] == ["acme/pegasus-tiny", "acme/qwen2-sharded", "acme/tiny-llama", "solo"]
    assert [r.family for r in found] == ["pegasus", "qwen2", "llama", "llama"]
    assert [r.mode for r in found] == ["transformers view", "converted", "converted", "converted"]
    assert [r.has_tokenizer for r in found] == [False, True, True, True]
    assert all(isinstance(r.to_dict()["folder"], str) for r in found)


def test_records_hold_exact_params_size_and_snapshot(hub):
    root, _, d = hub
    rec = {r.repo_id: r for r in cache.list_cached(root)}
    llama, lsnap = d["llama"]
    qwen, qsnap = d["qwen"]
    assert rec["acme/tiny-llama"].folder == lsnap and rec["acme/tiny-llama"].revision == REV_NEW
    assert rec["acme/tiny-llama"].n_params == n_params(llama / "model.safetensors")
    assert rec["acme/tiny-llama"].size_bytes == sum(p.stat().st_size for p in llama.iterdir() if p.is_file())
    assert rec["acme/qwen2-sharded"].folder == qsnap  # refs/main's snapshot, not the older one
    assert rec["acme/qwen2-sharded"].n_params == n_params(qwen / "model.safetensors")
    assert rec["solo"].folder == d["solo"][1]  # no refs/main: the only snapshot
    # the real count of a tiny Llama: embed + L·(4 attn + 3 mlp + 2 norms) + final norm + untied head
    v, dm, f = 300, 32, 40
    assert rec["acme/tiny-llama"].n_params == v * dm + 2 * (4 * dm * dm + 3 * dm * f + 2 * dm) + dm + v * dm


def test_resolve_cached_and_the_folder_loads(hub):
    root, _, d = hub
    assert cache.resolve_cached("acme/qwen2-sharded", root) == d["qwen"][1]
    assert cache.resolve_cached("solo", root) == d["solo"][1]
    for skipped in ("acme/pickle-only", "acme/remote-code", "acme/dangling", "acme/escape-weights",
                    "acme/escape-config", "acme/escape-snapshot", "acme/two-snaps", "acme/bad-json",
                    "acme/bad-index", "acme/missing", "../etc", "a/b/c", ""):
        assert cache.resolve_cached(skipped, root) is None, skipped
    lm = load_hf_folder(cache.resolve_cached("acme/qwen2-sharded", root), name="acme/qwen2-sharded")
    run = lm.run("the cat sat")
    assert lm.family == "qwen2" and len(run.records) == 2 and run.tokens


def test_root_from_environment(hub, monkeypatch, tmp_path):
    root, _, _ = hub
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_root() == tmp_path / ".cache" / "huggingface" / "hub"
    assert cache.list_cached() == []  # no cache at all: an empty list
    monkeypatch.setenv("HF_HOME", str(root.parent))
    assert cache.cache_root() == root and len(cache.list_cached()) == 4
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "nowhere"))
    assert cache.list_cached() == [] and cache.resolve_cached("acme/tiny-llama") is None
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    assert cache.resolve_cached("acme/tiny-llama") == root / cache.folder_name("acme/tiny-llama") / "snapshots" / REV_NEW


def test_reads_nothing_outside_the_root(hub, monkeypatch):
    """Every file opened lies inside the root (the escaping entries are never opened)."""
    root, outside, _ = hub
    opened = []
    real_open, real_read = open, Path.read_text

    def spy_open(path, *a, **k):
        opened.append(Path(path).resolve())
        return real_open(path, *a, **k)

    def spy_read(self, *a, **k):
        opened.append(self.resolve())
        return real_read(self, *a, **k)

    monkeypatch.setattr("builtins.open", spy_open)
    monkeypatch.setattr(Path, "read_text", spy_read)
    assert len(cache.list_cached(root)) == 4
    real_root = root.resolve()
    assert opened and all(real_root in p.parents for p in opened)
    assert not any(outside.resolve() in p.parents for p in opened)


def test_odd_names_and_repo_ids():
    assert cache.repo_id_of("models--org--name") == "org/name"
    assert cache.repo_id_of("models--gpt2") == "gpt2"
    for odd in ("models--a--b--c", "datasets--a--b", "models--", "models----x", "models--a--", "version.txt"):
        assert cache.repo_id_of(odd) is None, odd
    assert cache.folder_name("org/name") == "models--org--name"
    assert os.sep not in cache.folder_name("org/name")


# -- wired in: the registry, `attnlab models`, the app's model choices, the memory refusal -----------------------
def test_a_cached_repo_id_loads_by_name_and_is_listed(hub, monkeypatch, capsys):
    from attnlab.cli.main import main
    from attnlab.model import registry

    root, _, _ = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    assert registry.resolve("acme/tiny-llama")[0] == "cached"
    lm = registry.load("acme/tiny-llama", roots=[Path("/nowhere")])  # the server's own cache needs no root
    assert (lm.name, lm.source, lm.family) == ("acme/tiny-llama", "cache:acme/tiny-llama", "llama")
    assert lm.run("the cat sat").tokens
    assert registry.resolve("acme/not-there") == ("hub", None)  # not cached: a hub id, as before
    choices = registry.model_choices()
    assert {"acme/tiny-llama", "acme/qwen2-sharded", "solo"} <= set(choices) and choices[0] != "acme/tiny-llama"
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["repo_id"] for m in listed["cached"]] == [m.repo_id for m in cache.list_cached(root)]
    assert {m["name"] for m in listed["models"]} >= {"random-decoder", "minilm"}


def test_a_folder_too_large_for_the_free_memory_is_refused_before_loading(hub, monkeypatch):
    from attnlab.model import memory, registry
    from attnlab.model.inputs import InputError

    root, _, _ = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 10_000)
    with pytest.raises(InputError, match=r"^this model needs about 1 MB at 64 tokens in float32 but only 0 MB is free"):
        registry.load("acme/tiny-llama")
    cfg = memory.folder_config(cache.resolve_cached("acme/tiny-llama", root))
    need32 = memory.estimate_bytes(cfg, 64)["total"]
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: need32 - 1)  # bfloat16 would fit
    with pytest.raises(InputError, match="load it in bfloat16"):
        registry.load("acme/tiny-llama")
