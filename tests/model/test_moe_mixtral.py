"""Mixtral folders → our MoE decoder: logits, hidden states, attention and router logits equal to transformers'
(its `output_router_logits`), the same greedy tokens, both expert layouts (per expert and fused), and the
`attnlab compare-hf` / `attnlab models` commands on it."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model.checkpoint import CheckpointError  # noqa: E402
from attnlab.model.families.llama import convert_llama, llama_config  # noqa: E402
from attnlab.model.hf.load import load_hf_folder  # noqa: E402
from attnlab.model.parity import TOL_LOGITS, compare_models, load_transformers, within_tolerance  # noqa: E402

from tests import hf_fixtures as F  # noqa: E402

pytest.importorskip("transformers")
TEXT = "the cat sat on the mat because the mat was warm"
SHAPES = {  # name: MixtralConfig kwargs
    "mixtral-4x-top2-gqa": dict(hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                                max_position_embeddings=64),
    "mixtral-3x-top1-window": dict(hidden_size=24, intermediate_size=20, num_hidden_layers=3, num_attention_heads=3,
                                   num_key_value_heads=3, num_local_experts=3, num_experts_per_tok=1,
                                   max_position_embeddings=48, sliding_window=5, tie_word_embeddings=True),
}


def make_mixtral(folder: Path, seed: int = 0, **cfg) -> Path:
    from transformers import MixtralConfig, MixtralForCausalLM

    F.quiet_transformers()
    tok = F.bpe_tokenizer()
    eot = tok.token_to_id(F.EOT)
    conf = MixtralConfig(**{"vocab_size": tok.get_vocab_size(), "bos_token_id": eot, "eos_token_id": eot, **cfg})
    return F._save_causal(MixtralForCausalLM, conf, folder, tok, seed)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf_mixtral")
    return {name: make_mixtral(root / name, **conf) for name, conf in SHAPES.items()}


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_equal_to_transformers(folders, name, backend):
    conf = SHAPES[name]
    lm = load_hf_folder(folders[name])
    assert (lm.family, lm.cfg.mlp, lm.cfg.expert_mlp) == ("mixtral", "moe", "swiglu")
    assert (lm.cfg.n_experts, lm.cfg.top_k) == (conf["num_local_experts"], conf["num_experts_per_tok"])
    assert lm.cfg.sliding_window == conf.get("sliding_window")
    hf = load_transformers(lm)
    report = compare_models(lm, hf, lm.encode(TEXT), backend=backend, greedy_tokens=12)
    assert report["max_abs_logits"] <= TOL_LOGITS
    assert report["max_abs_router_logits"] <= TOL_LOGITS
    assert report["greedy_equal"] is True
    assert within_tolerance(report)


def test_router_choice_equals_transformers_topk(folders):
    """The experts we send each token to are the top-k of transformers' router logits, in the same order."""
    lm = load_hf_folder(folders["mixtral-4x-top2-gqa"])
    hf = load_transformers(lm)
    inputs = lm.encode(TEXT)
    run = lm.forward(inputs)
    with torch.no_grad():
        out = hf(inputs.ids, output_router_logits=True)
    for i, r in enumerate(out.router_logits):
        theirs = torch.softmax(r.float(), -1).topk(2, -1).indices.numpy()  # [T, 2]
        assert (run.capture.routers[f"blocks.{i}.mlp"][0].choice[0] == theirs).all()


def test_fused_expert_layout_converts_the_same(folders):
    """transformers' in-memory layout (gate_up_proj [E, 2I, D], down_proj [E, D, I]) gives the same weights as
    the per-expert w1/w3/w2 that save_pretrained writes."""
    from transformers import MixtralForCausalLM

    lm = load_hf_folder(folders["mixtral-4x-top2-gqa"])
    fused = MixtralForCausalLM.from_pretrained(folders["mixtral-4x-top2-gqa"], local_files_only=True).state_dict()
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in fused)
    ours = convert_llama(fused, lm.cfg, "mixtral")
    mine = lm.model.state_dict()
    assert set(ours) <= set(mine)
    for k, v in ours.items():
        assert torch.equal(v, mine[k]), k


def test_missing_expert_is_named(folders):
    from attnlab.model.checkpoint import load_state

    folder = folders["mixtral-4x-top2-gqa"]
    cfg = llama_config(json.loads((folder / "config.json").read_text()))
    state = load_state(folder / "model.safetensors")
    del state["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    with pytest.raises(CheckpointError, match="experts.3.w2"):
        convert_llama(state, cfg, "mixtral")


def test_compare_hf_and_models_commands(folders, capsys):
    folder = str(folders["mixtral-3x-top1-window"])
    assert main(["compare-hf", "--model", folder]) == 0
    out = capsys.readouterr().out
    assert "router logits" in out and "PASS" in out
    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert listed["lecture-moe"]["experts"] == {"n": 4, "top_k": 2} and listed["lecture-moe"]["mlp"] == "moe"
    assert listed["lecture-decoder"]["experts"] is None
