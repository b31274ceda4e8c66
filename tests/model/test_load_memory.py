"""Half precision without a twin: a ~100 M-parameter bf16 Llama checkpoint (random, built here) loads straight
from the file — peak ≤ 1.25× and held ≤ 1.1× its weights' bytes, no more than transformers — and the float32
reference the checks need exists only while asked for."""

from __future__ import annotations

import gc

import pytest
import torch
from attnlab.bench.load_meter import measure
from attnlab.bench.real_size import build_checkpoint
from attnlab.model.registry import load
from safetensors import safe_open


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_checkpoint("llama-100m", tmp_path_factory.mktemp("l100") / "llama-100m")


@pytest.fixture(scope="module")
def measured(folder):
    """{(who, dtype): load_meter row}, each load in a fresh process, measured once per dtype asked."""
    cache = {}

    def get(who, dtype):
        if (who, dtype) not in cache:
            cache[who, dtype] = measure(str(folder), who, dtype)
        return cache[who, dtype]

    return get


@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float32", marks=pytest.mark.slow)])
def test_peak_and_held_memory_within_the_weights(measured, dtype):
    ours, theirs = measured("attnlab", dtype), measured("transformers", dtype)
    w = ours["weight_bytes"]
    assert ours["n_params"] == theirs["n_params"] == 99_496_704 and w == 99_496_704 * (2 if dtype == "bfloat16" else 4)
    assert ours["peak_bytes"] <= 1.25 * w, ours
    assert ours["held_bytes"] <= 1.1 * w, ours
    assert ours["peak_bytes"] <= theirs["peak_bytes"] + 0.05 * w, (ours, theirs)  # no more than transformers
    assert ours["held_bytes"] <= theirs["held_bytes"] + 0.05 * w, (ours, theirs)


def test_load_time_is_transformers_class(measured):
    ours, theirs = measured("attnlab", "bfloat16"), measured("transformers", "bfloat16")
    assert ours["seconds"] <= 2 * theirs["seconds"] + 0.5, (ours, theirs)  # a shared CPU: a loose bound


def test_weights_are_the_file_tensors_and_the_reference_is_built_on_demand(folder):
    lm = load(str(folder))  # no dtype: the checkpoint's own
    assert lm.dtype == torch.bfloat16
    params = dict(lm.model.named_parameters())
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        q = f.get_tensor("model.layers.3.self_attn.q_proj.weight")
        k = f.get_tensor("model.layers.3.self_attn.k_proj.weight")
        assert torch.equal(params["embed.tok.weight"], f.get_tensor("model.embed_tokens.weight"))
        assert torch.equal(params["lm_head.weight"], f.get_tensor("lm_head.weight"))
    wq, wk = params["blocks.3.attn.q.weight"], params["blocks.3.attn.k.weight"]  # qkv_layout "split": as stored
    assert wq.dtype == torch.bfloat16 and torch.equal(wq, q) and torch.equal(wk, k)
    assert all(p.dtype == torch.bfloat16 for p in lm.model.parameters())
    ref = lm.reference_model()  # float32, from the file: exactly the stored values upcast
    assert ref.dtype == torch.float32 and torch.equal(dict(ref.model.named_parameters())["blocks.3.attn.k.weight"],
                                                      wk.float())
    inp = lm.encode("the cat sat on the mat")
    a, b = lm.forward(inp, backend="eager").logits.float(), ref.forward(inp, backend="eager").logits
    assert (a - b).abs().max() < 0.05 * b.abs().max()  # bf16 vs float32 on the same weights
    del ref
    gc.collect()
    assert not any(p.dtype == torch.float32 for p in lm.model.parameters())  # nothing kept beside the model


def test_float32_upcast_from_a_bf16_file_and_back(folder):
    lm = load(str(folder), dtype=torch.float32)
    assert lm.dtype == torch.float32 and lm.reference_model() is lm
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        emb = f.get_tensor("model.embed_tokens.weight")
    assert torch.equal(lm.model.embed.tok.weight, emb.float())
    lm.to(dtype=torch.bfloat16)
    assert torch.equal(lm.model.embed.tok.weight, emb)  # bf16 → fp32 → bf16 is exact
