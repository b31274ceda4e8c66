"""Llama, Qwen2 and Mistral folders → our model: parity with transformers under every backend (GQA ratios
1, 2, 4 and MQA; Qwen2's q/k/v biases; Mistral's sliding window; tied and untied heads), sharded weights,
and one clear message per refused config or folder."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model import parity as compare  # noqa: E402
from attnlab.model.checkpoint import CheckpointError  # noqa: E402
from attnlab.model.families.llama import convert_llama, llama_config  # noqa: E402
from attnlab.model.hf.load import load_hf_folder  # noqa: E402
from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS, compare_models, load_transformers  # noqa: E402

from tests import hf_fixtures as F  # noqa: E402

pytest.importorskip("transformers")
BACKENDS = ("eager", "sdpa", "flash")
TEXT = "the cat sat on the mat because the mat was warm"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf_llama")
    return {name: F.build("llama", name, root) for name in F.LLAMA_SHAPES}


def _copy(folders, name, tmp_path) -> Path:
    dst = tmp_path / name
    shutil.copytree(folders[name], dst)
    return dst


def _edit_config(folder: Path, **change) -> None:
    conf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**conf, **change}))


# -- numbers -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(F.LLAMA_SHAPES))
def test_equal_to_transformers_every_backend(folders, name):
    family, conf = F.LLAMA_SHAPES[name]
    lm = load_hf_folder(folders[name])
    cfg = lm.cfg
    assert (lm.family, cfg.norm_type, cfg.mlp, cfg.positional, cfg.bias) == (family, "rmsnorm", "swiglu", "rope", False)
    assert cfg.kv_heads == conf["num_key_value_heads"] and cfg.attn_bias == (family == "qwen2")
    assert cfg.tie_embeddings == conf.get("tie_word_embeddings", False)
    assert cfg.sliding_window == conf.get("sliding_window")
    hf = load_transformers(lm)
    inputs = lm.encode(TEXT)
    assert inputs.ids.shape[1] > (cfg.sliding_window or 0)  # the window is smaller than the text
    for backend in BACKENDS:
        r = compare_models(lm, hf, inputs, backend=backend)
        assert r["max_abs_attention"] <= TOL_ATTENTION, (backend, r)
        assert r["max_abs_hidden"] <= TOL_HIDDEN and r["max_abs_logits"] <= TOL_LOGITS, (backend, r)
        assert r["greedy_equal"] is True and compare.within_tolerance(r), (backend, r)


def test_greedy_twenty_tokens_and_records(folders):
    lm = load_hf_folder(folders["qwen2-gqa4-bias-tied"])
    hf = load_transformers(lm)
    ids = lm.encode("the cat").ids
    assert ids.shape[1] + 20 <= lm.cfg.max_len
    for backend in BACKENDS:
        assert compare.greedy_equal(lm, hf, ids, 20, backend)
    run = lm.run(TEXT, backend="sdpa")
    rec = run.records["blocks.2.attn"]
    assert rec.pattern().shape[0] == 8 and rec.n_kv_heads == 2 and rec.kv_head(5) == 1


def test_mistral_window_is_applied_on_both_sides(folders):
    lm = load_hf_folder(folders["mistral-window5-mqa"])
    hf = load_transformers(lm)
    inputs = lm.encode(TEXT)
    T = inputs.ids.shape[1]
    with torch.no_grad():
        theirs = hf(inputs.ids, output_attentions=True).attentions[1][0].numpy()  # [H, T, T]
    ours = lm.forward(inputs, backend="flash").capture["blocks.1.attn"]
    allowed = np.array([[0 <= q - k < 5 for k in range(T)] for q in range(T)])
    np.testing.assert_array_equal(ours.mask_for(), allowed)
    assert (theirs[:, ~allowed] == 0).all() and (ours.pattern()[:, ~allowed] == 0).all()
    np.testing.assert_allclose(ours.pattern(), theirs, atol=TOL_ATTENTION)
    # Without the window the numbers differ: the test text is long enough for the window to matter.
    causal = lm.forward(inputs, mask=lm.mask_spec(("causal",), T)).logits
    assert (causal - lm.forward(inputs).logits).abs().max() > 1e-3


def test_cli_compare_hf_mistral(folders, capsys):
    rc = main(["compare-hf", "--model", str(folders["mistral-window3-gqa2"]), "--text", TEXT, "--json",
               "--backend", "sdpa"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["greedy_equal"] is True and (out["n_layers"], out["n_heads"]) == (1, 8), out
    assert out["max_abs_attention"] <= TOL_ATTENTION and out["max_abs_logits"] <= TOL_LOGITS


def test_sharded_safetensors(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    f = _copy(folders, "qwen2-gqa4-bias-tied", tmp_path)
    state = load_file(str(f / "model.safetensors"))
    (f / "model.safetensors").unlink()
    keys = sorted(state)
    shards = {f"model-0000{i + 1}-of-00003.safetensors": keys[i::3] for i in range(3)}
    for name, ks in shards.items():
        save_file({k: state[k] for k in ks}, str(f / name))
    weight_map = {k: name for name, ks in shards.items() for k in ks}
    (f / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    lm = load_hf_folder(f)
    r = compare_models(lm, load_transformers(lm), lm.encode(TEXT))  # transformers reads the shards too
    assert compare.within_tolerance(r) and r["greedy_equal"], r


# -- config mapping and refusals ---------------------------------------------------------------------------
BASE = dict(model_type="llama", vocab_size=50, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, intermediate_size=40, max_position_embeddings=64)


def test_config_mapping_old_and_new_rope_fields():
    cfg = llama_config({**BASE, "rope_theta": 1234.0, "rope_scaling": None, "rms_norm_eps": 1e-5})
    assert (cfg.rope_base, cfg.norm_eps, cfg.kv_heads, cfg.hidden, cfg.tie_embeddings) == (1234.0, 1e-5, 2, 40, False)
    cfg = llama_config({**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 99.0}})
    assert cfg.rope_base == 99.0 and cfg.qkv_bias is None and cfg.sliding_window is None
    qwen = llama_config({**BASE, "model_type": "qwen2", "num_key_value_heads": None, "use_sliding_window": False,
                         "sliding_window": None, "layer_types": ["full_attention"] * 2})
    assert qwen.attn_bias and qwen.kv_heads == 4
    assert llama_config({**BASE, "model_type": "mistral", "sliding_window": 7}).sliding_window == 7
    assert llama_config({**BASE, "model_type": "mistral", "sliding_window": None}).sliding_window is None
    biased = llama_config({**BASE, "attention_bias": True, "mlp_bias": True})  # converted since issue 38
    assert biased.attn_bias and biased.attn_out_bias and biased.mlp_biases
    assert not llama_config({**BASE, "model_type": "mistral", "attention_bias": True}).attn_bias  # not Mistral's key


@pytest.mark.parametrize("bad, match", [
    (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "RoPE scaling 'dynamic' is not supported .*cached"),
    (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}), r"missing \['high_freq_factor'"),
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, "beta": 1}), r"unknown \['beta'\]"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.2}), "rotary_dim=1 must be even"),
    (dict(hidden_act="gelu"), "activation 'gelu'"),
    (dict(num_key_value_heads=3), "n_kv_heads=3 must be ≥ 1 and divide n_heads=4"),
    (dict(model_type="qwen2", use_sliding_window=True, sliding_window=4, layer_types=["sliding_attention"]),
     "qwen2: layer_types=.* must name full_attention or sliding_attention for each of the 2 layers"),
    (dict(model_type="qwen2", layer_types=["full_attention", "sliding_attention"]),
     "qwen2: layer_types names sliding-attention layers but use_sliding_window is false"),
    (dict(intermediate_size=None), "lacks intermediate_size"),
])
def test_config_refuses(bad, match):
    with pytest.raises(CheckpointError, match=match):
        llama_config({**BASE, **bad})


def test_converter_checks_every_key(folders):
    from safetensors.torch import load_file

    f = folders["llama-gqa2-tied-theta"]
    hf = json.loads((f / "config.json").read_text())
    cfg = llama_config(hf)
    state = load_file(str(f / "model.safetensors"))
    ours = convert_llama(state, cfg)
    d_kv = 2 * 8
    assert cfg.qkv_layout == "split" and "blocks.0.attn.qkv.weight" not in ours
    for part, rows in (("q", 32), ("k", d_kv), ("v", d_kv)):  # the checkpoint's own tensors, not copies
        t = ours[f"blocks.0.attn.{part}.weight"]
        assert t.shape == (rows, 32) and t is state[f"model.layers.0.self_attn.{part}_proj.weight"]
    fused = convert_llama(state, cfg.replace(qkv_layout="fused"))  # rows q | k | v in one weight
    assert fused["blocks.0.attn.qkv.weight"].shape == (32 + 2 * d_kv, 32)
    assert torch.equal(fused["blocks.0.attn.qkv.weight"][32:32 + d_kv], state["model.layers.0.self_attn.k_proj.weight"])
    with pytest.raises(CheckpointError, match=r"k_proj\.weight has shape \(16, 32\), config\.json needs \(32, 32\)"):
        convert_llama(state, cfg.replace(n_kv_heads=None))  # the config says MHA, the weights are GQA
    bad = {**state, "model.layers.0.self_attn.q_proj.bias": torch.zeros(32)}
    with pytest.raises(CheckpointError, match="has attention biases .* its config.json does not ask for them"):
        convert_llama(bad, cfg)
    bad = {k: v for k, v in state.items() if k != "model.layers.1.mlp.gate_proj.weight"}
    with pytest.raises(CheckpointError, match=r"lacks layers\.1\.mlp\.gate_proj\.weight"):
        convert_llama(bad, cfg)
    with pytest.raises(CheckpointError, match=r"unexpected weights layers\.2\."):
        convert_llama({**state, "model.layers.2.input_layernorm.weight": torch.ones(32)}, cfg)
    with pytest.raises(CheckpointError, match="no lm_head.weight"):
        convert_llama(state, cfg.replace(tie_embeddings=False))


# -- bad folders: one clear message each --------------------------------------------------------------------
def test_bad_folders(folders, tmp_path):
    f = _copy(folders, "llama-mha-untied", tmp_path)
    _edit_config(f, model_type="falcon")
    with pytest.raises(CheckpointError, match="llama-mha-untied: transformers cannot read config.json"):  # a view
        load_hf_folder(f)
    _edit_config(f, model_type="llama", auto_map={"AutoModelForCausalLM": "modeling_x.X"})
    with pytest.raises(CheckpointError, match="auto_map / trust_remote_code.; attnlab never runs"):
        load_hf_folder(f)
    _edit_config(f, auto_map=None, rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0})
    with pytest.raises(CheckpointError, match="llama: RoPE scaling 'dynamic' is not supported"):
        load_hf_folder(f)
    q = _copy(folders, "qwen2-mqa-bias", tmp_path)
    (q / "model.safetensors").unlink()
    (q / "pytorch_model.bin").write_bytes(pickle.dumps({"not": "loaded"}))
    with pytest.raises(CheckpointError, match="pytorch_model.bin, a pickle file; it is not loaded"):
        load_hf_folder(q)
