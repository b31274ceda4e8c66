"""compare-hf on a checkpoint stored in bfloat16 (most released weights) or float16: both sides are compared in
float32. It used to load ours in the stored dtype and stop with a traceback ("TypeError: Got unsupported
ScalarType BFloat16") before printing a number."""

from __future__ import annotations

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
