"""Run in a subprocess by test_hub.py (huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE at import): serve
tiny repositories from a loopback stand-in hub, drive `attnlab pull` and loads by hub id through cli.main and
the registry, and print what happened as JSON."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # before tests.hf_fixtures' setdefault and the HF imports
    os.environ[_var] = "0"
TEXT = "the cat sat on the mat"


def cli(*argv: str) -> dict:
    from attnlab.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}


def write_repos(root: Path, work: Path) -> dict[str, Path]:
    from tests.hf_fixtures import build
    from tests.view.fixtures import make_view_model

    view = make_view_model("gptj", work / "gptj")
    gpt2 = build("gpt2", "gpt2-3heads-bpe", work)
    repos = {"tinyview": view, "acme/tiny-gpt2": gpt2, "acme/cut": view}
    for repo, src in repos.items():
        shutil.copytree(src, root / repo)
    (root / "tinyview" / "pytorch_model.bin").write_bytes(b"\x80\x04 not to be fetched")
    (root / "tinyview" / "modeling_evil.py").write_text("raise SystemExit('repository code ran')\n")
    (root / "tinyview" / "onnx").mkdir()
    (root / "tinyview" / "onnx" / "model.safetensors").write_bytes(b"nested: not fetched")
    pickled = root / "acme" / "pickled"
    pickled.mkdir(parents=True)
    shutil.copy(view / "config.json", pickled / "config.json")
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04junk")
    remote = root / "acme" / "remote"
    shutil.copytree(view, remote)
    cfg = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps(cfg | {"auto_map": {"AutoModelForCausalLM": "modeling_x.X"}}))
    huge = root / "acme" / "huge"
    huge.mkdir()
    shutil.copy(view / "config.json", huge / "config.json")
    with open(huge / "model.safetensors", "wb") as f:  # sparse: 16 TB listed, nothing on disk
        f.truncate(16 * 10**12)
    return repos


def same_attention(a, b) -> bool:
    ra, rb = a.run(TEXT), b.run(TEXT)
    return ra.ids == rb.ids and all(np.array_equal(ra.records[s].pattern(), rb.records[s].pattern())
                                    for s in ra.records)


def main(root: Path, work: Path) -> dict:
    from attnlab.model import registry
    from attnlab.model.hf.cache import list_cached, resolve_cached

    from tests.view.hub_standin import StandInHub

    repos = write_repos(root, work)
    res: dict = {}
    with StandInHub(root) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        res["dry"] = cli("pull", "tinyview", "--dry-run", "--json")
        res["pull"] = cli("pull", "tinyview")
        res["pulled_files"] = sorted(p.name for p in Path(resolve_cached("tinyview") or "/nonexistent").iterdir()) \
            if resolve_cached("tinyview") else None
        res["fetched"] = sorted(p.split("/resolve/")[1] for (m, p), n in hub.requests.items() if m == "GET"
                                and "/resolve/" in p and p.startswith("/tinyview/"))
        lm = registry.load("tinyview")
        res["bare_id"] = {"type": type(lm).__name__, "source": lm.source,
                          "same": same_attention(lm, registry.load(str(repos["tinyview"])))}
        res["capture"] = cli("capture", "--model", "tinyview", "--text", TEXT, "--out", str(work / "run.npz"))
        gpt2 = registry.load("acme/tiny-gpt2")  # not pulled: loading a hub id fetches it first
        res["org_id"] = {"type": type(gpt2).__name__, "source": gpt2.source,
                         "same": same_attention(gpt2, registry.load(str(repos["acme/tiny-gpt2"])))}
        res["listed"] = {m.repo_id: m.mode for m in list_cached()}
        res["models"] = cli("models")
        res["missing"] = cli("pull", "acme/nothing")
        res["revision"] = cli("pull", "tinyview", "--revision", "v9")
        res["pickled"] = cli("pull", "acme/pickled")
        res["remote"] = cli("pull", "acme/remote")
        res["remote_weights_fetched"] = hub.requests[("GET", "/acme/remote/resolve/" + _commit("acme/remote")
                                                      + "/model.safetensors")]
        res["huge"] = cli("pull", "acme/huge")
        res["huge_fetched"] = sum(n for (m, p), n in hub.requests.items() if "/acme/huge/resolve/" in p)
        hub.cut.add("model.safetensors")
        res["cut"] = cli("pull", "acme/cut")
        res["cut_resolves"] = registry.resolve("acme/cut")[0]
        snap = Path(os.environ["HF_HOME"]) / "hub" / "models--acme--cut" / "snapshots"
        res["cut_snapshot"] = sorted(p.name for s in snap.iterdir() for p in s.iterdir()) if snap.is_dir() else []
        hub.cut.clear()
        res["cut_again"] = cli("pull", "acme/cut")
        res["cut_loads"] = same_attention(registry.load("acme/cut"), registry.load(str(repos["acme/cut"])))
    os.environ["HF_HUB_OFFLINE"] = "1"  # read by model/hub.py at call time
    res["offline"] = cli("capture", "--model", "gpt2", "--text", TEXT, "--out", str(work / "x.npz"))
    res["offline_cached"] = type(registry.load("tinyview")).__name__
    return res


def _commit(repo_id: str) -> str:
    from tests.view.hub_standin import commit_of

    return commit_of(repo_id)


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
