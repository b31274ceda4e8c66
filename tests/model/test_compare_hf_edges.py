"""compare-hf where its first version stopped with a traceback: a checkpoint stored in bfloat16 (most released
weights) or float16 is compared in float32 on both sides (it loaded ours in the stored dtype: "TypeError: Got
unsupported ScalarType BFloat16"); a folder transformers itself cannot load is one line saying so."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from attnlab.cli.main import main
from attnlab.model.parity import compare_hf

from tests import family_grid as G

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float16])
def stored(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("stored")
    f32 = G.make(root / "f32", "llama", "LlamaForCausalLM", **G.TINY["llama"][1])
    folder = root / str(request.param).removeprefix("torch.")
    transformers.LlamaForCausalLM.from_pretrained(str(f32)).to(request.param).save_pretrained(folder)
    for name in ("tokenizer.json", "special_tokens_map.json"):
        shutil.copy(f32 / name, folder / name)
    return folder


def test_compare_hf_reads_both_in_float32(stored):
    r = compare_hf(str(stored), G.TEXT)
    assert r["max_abs_logits"] <= 1e-5 and r["max_abs_attention"] <= 1e-6, r
    assert r["greedy_equal"] and r["tokens_equal"]


def test_the_command_passes(stored, capfd):
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(stored)]) == 0
    out, err = capfd.readouterr()
    assert out.strip().splitlines()[-1] == "PASS" and "Traceback" not in out + err


def test_a_folder_transformers_refuses_is_one_line(tmp_path, capfd):
    """Phi-3 without pad_token_id: transformers' default (32000) lies outside this vocabulary, so transformers
    cannot build it; ours reads it (no padding row), and compare-hf says why there is nothing to compare."""
    folder = G.make(tmp_path / "phi3", "phi3", "Phi3ForCausalLM", **G.TINY["phi3"][1])
    config = json.loads((folder / "config.json").read_text())
    del config["pad_token_id"]
    (folder / "config.json").write_text(json.dumps(config))
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(folder)]) == 2
    out, err = capfd.readouterr()
    assert err.strip().splitlines() == [
        f"attnlab: error: transformers cannot load {folder} as Phi3ForCausalLM (AssertionError: Padding_idx must be "
        "within num_embeddings), so there is nothing to compare with"]
    assert "Traceback" not in out + err
