"""`attnlab pull` and hub ids against a stand-in hub on a loopback port (no network): pull, load by bare id and
by org/name, a 404, a missing revision, pickle-only weights, remote code, a download cut off half-way and an
oversized repository. The scenarios run in one subprocess (huggingface_hub reads HF_ENDPOINT at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    for d in ("repos", "work", "home"):
        (tmp / d).mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env |= {"HF_HOME": str(tmp / "home"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DISABLE_XET": "1"}
    out = subprocess.run([sys.executable, "-m", "tests.view.hub_driver", str(tmp / "repos"), str(tmp / "work")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, out.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


def one_line(r: dict) -> str:
    assert r["rc"] == 2, r
    lines = [x for x in r["err"].splitlines() if x.startswith("attnlab: error:")]
    assert len(lines) == 1 and "Traceback" not in r["err"], r["err"]
    return lines[0]


def test_pull_fetches_config_tokenizer_and_safetensors_only(res):
    dry = json.loads(res["dry"]["out"])
    assert dry["downloaded"] is False and set(dry["files"]) == {"config.json", "generation_config.json",
                                                                 "model.safetensors", "special_tokens_map.json",
                                                                 "tokenizer.json"}
    assert dry["bytes"] == sum(dry["files"].values()) and dry["files"]["model.safetensors"] > 10_000
    assert res["pull"]["rc"] == 0 and "load it with --model tinyview" in res["pull"]["out"]
    assert "tinyview @ main" in res["pull"]["err"] and "5 files" in res["pull"]["err"]
    assert res["pulled_files"] == sorted(dry["files"])
    assert res["fetched"] == sorted(f"{dry['commit']}/{f}" for f in dry["files"])  # no .bin, .py or onnx/


def test_loads_by_bare_id_and_org_id_exactly(res):
    assert res["bare_id"] == {"type": "ViewModel", "source": "cache:tinyview", "same": True}
    assert res["org_id"] == {"type": "LoadedModel", "source": "hub:acme/tiny-gpt2", "same": True}
    assert res["capture"]["rc"] == 0, res["capture"]
    assert res["listed"] == {"acme/tiny-gpt2": "converted", "tinyview": "transformers view"}
    line = next(x for x in res["models"]["out"].splitlines() if x.startswith("tinyview "))
    assert line.split(None, 1)[1].startswith("in the Hugging Face cache: gptj, transformers view")


def test_failures_are_one_line(res):
    assert "unknown model 'acme/nothing'" in one_line(res["missing"])
    assert "has no revision 'v9'" in one_line(res["revision"])
    assert "only pickle weights (pytorch_model.bin)" in one_line(res["pickled"])
    assert "asks for the repository's own Python code" in one_line(res["remote"])
    assert res["remote_weights_fetched"] == 0
    assert "acme/huge is 16000.00 GB; the disk of" in one_line(res["huge"])
    assert res["huge_fetched"] == 0  # refused from the listing: no file of it was asked for


def test_a_cut_download_is_never_used(res):
    line = one_line(res["cut"])
    assert "download of acme/cut/model.safetensors stopped" in line and "nothing half-written is used" in line
    assert res["cut_resolves"] == "hub"  # not a cached model: the cache listing skips the partial snapshot
    assert "model.safetensors" not in res["cut_snapshot"] and "config.json" in res["cut_snapshot"]
    assert res["cut_again"]["rc"] == 0 and res["cut_loads"] is True


def test_offline_is_one_short_line(res):
    line = one_line(res["offline"])
    assert "unknown model 'gpt2': not in the local Hugging Face cache" in line and "HF_HUB_OFFLINE is set" in line
    assert "`attnlab pull gpt2`" in line and len(line) < 400
    assert res["offline_cached"] == "ViewModel"  # what was pulled loads offline
