"""The decoder families at parity with transformers on a grid of tiny random shapes each (GQA ratios, tied and
untied heads, head_dim ≠ d_model/heads, windows (Qwen2's and Qwen3's on some layers too), partial rotary, RoPE
scaling, soft-capping, GPT-Neo's unscaled scores and local layers, BLOOM's ALiBi, Gemma 3's local and global RoPE), under every backend, greedy tokens identical; each family passes `attnlab check` (eager ≡ sdpa ≡ flash, cached ≡ uncached)."""

from __future__ import annotations

import pytest
from attnlab.analysis.machinery.checks import run_checks
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G

pytest.importorskip("transformers")

_D = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, max_position_embeddings=64,
          num_attention_heads=4, num_key_value_heads=2)
_LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
GRID = {
    # name: (model_type, transformers class, config kwargs)
    "llama-llama3-rope": ("llama", "LlamaForCausalLM", dict(_D, rope_parameters=_LLAMA3)),
    "llama-linear-rope-mqa": ("llama", "LlamaForCausalLM", dict(_D, num_key_value_heads=1, rope_parameters={
        "rope_type": "linear", "rope_theta": 500.0, "factor": 2.5})),
    "llama-headdim16-gqa4": ("llama", "LlamaForCausalLM", dict(_D, num_attention_heads=8, head_dim=16)),
    "qwen3-gqa2-headdim16": ("qwen3", "Qwen3ForCausalLM", dict(_D, head_dim=16)),
    "qwen3-mqa-tied": ("qwen3", "Qwen3ForCausalLM", dict(_D, num_key_value_heads=1, tie_word_embeddings=True,
                                                          rms_norm_eps=1e-5)),
    "qwen2-window4-from-layer1": ("qwen2", "Qwen2ForCausalLM", dict(_D, use_sliding_window=True, sliding_window=4,
                                                                     max_window_layers=1)),
    "qwen3-window3-types": ("qwen3", "Qwen3ForCausalLM", dict(_D, head_dim=16, num_hidden_layers=3, use_sliding_window=True,
                                                              sliding_window=3, layer_types=[
                                                                  "sliding_attention", "full_attention",
                                                                  "sliding_attention"])),
    "gemma-gqa2-headdim16": ("gemma", "GemmaForCausalLM", dict(_D, head_dim=16)),
    "gemma-mha-untied": ("gemma", "GemmaForCausalLM", dict(_D, num_key_value_heads=4, head_dim=8,
                                                            tie_word_embeddings=False)),
    "gemma2-alternating-capped": ("gemma2", "Gemma2ForCausalLM", dict(
        _D, head_dim=16, num_hidden_layers=3, sliding_window=4, query_pre_attn_scalar=12,
        attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gemma2-types-uncapped-mqa": ("gemma2", "Gemma2ForCausalLM", dict(
        _D, head_dim=8, num_key_value_heads=1, num_hidden_layers=3, sliding_window=3, query_pre_attn_scalar=8,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"], attn_logit_softcapping=None,
        final_logit_softcapping=None)),
    "gemma3-pattern3-mqa": ("gemma3_text", "Gemma3ForCausalLM", dict(
        _D, head_dim=8, num_key_value_heads=1, num_hidden_layers=4, sliding_window=3, query_pre_attn_scalar=8,
        sliding_window_pattern=3, rope_theta=1000.0, rope_local_base_freq=30.0, final_logit_softcapping=2.5)),
    "phi3-gqa2": ("phi3", "Phi3ForCausalLM", dict(_D, pad_token_id=None)),
    "phi3-window5-partial-tied": ("phi3", "Phi3ForCausalLM", dict(
        _D, pad_token_id=None, sliding_window=5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
    "phi-partial05": ("phi", "PhiForCausalLM", dict(_D, num_key_value_heads=4, partial_rotary_factor=0.5)),
    "phi-partial04-qknorm-gqa": ("phi", "PhiForCausalLM", dict(_D, hidden_size=40, partial_rotary_factor=0.4,
                                                                qk_layernorm=True)),
    "neox-parallel-rot025": ("gpt_neox", "GPTNeoXForCausalLM", dict(
        hidden_size=64, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, rotary_pct=0.25)),
    "neox-sequential-tied-full": ("gpt_neox", "GPTNeoXForCausalLM", dict(
        hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=64, rotary_pct=1.0, use_parallel_residual=False, tie_word_embeddings=True)),
    "neo-alternating-window4": ("gpt_neo", "GPTNeoForCausalLM", dict(
        hidden_size=32, num_layers=4, num_heads=4, max_position_embeddings=64, window_size=4,
        attention_types=[[["global", "local"], 2]])),
    "neo-local-untied-relu": ("gpt_neo", "GPTNeoForCausalLM", dict(
        hidden_size=24, num_layers=2, num_heads=3, max_position_embeddings=64, window_size=3, intermediate_size=40,
        attention_types=[[["local"], 2]], activation_function="relu", tie_word_embeddings=False)),
    "bloom-4heads-untied": ("bloom", "BloomForCausalLM", dict(hidden_size=32, n_layer=2, n_head=4,
                                                              tie_word_embeddings=False)),
    "bloom-6heads": ("bloom", "BloomForCausalLM", dict(hidden_size=48, n_layer=3, n_head=6, layer_norm_epsilon=1e-6)),
    "opt-pre-ln": ("opt", "OPTForCausalLM", dict(hidden_size=32, ffn_dim=40, num_hidden_layers=2,
                                                 num_attention_heads=4, max_position_embeddings=64,
                                                 word_embed_proj_dim=32)),
    "opt-post-ln-untied": ("opt", "OPTForCausalLM", dict(hidden_size=24, ffn_dim=40, num_hidden_layers=2,
                                                         num_attention_heads=3, max_position_embeddings=64,
                                                         word_embed_proj_dim=24, do_layer_norm_before=False,
                                                         tie_word_embeddings=False)),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {name: G.make(root / name, mt, cls, seed=i, **conf) for i, (name, (mt, cls, conf)) in enumerate(GRID.items())}


@pytest.mark.parametrize("name", list(GRID))
def test_parity_every_backend(folders, name):
    worst = G.assert_parity(G.parity(folders[name]))
    assert all(v <= 1e-4 for v in worst.values()), worst


def test_the_grid_exercises_each_mechanism(folders):
    cfg = {name: load_hf_folder(folders[name]).cfg for name in GRID}
    assert cfg["llama-llama3-rope"].rope_scaling == "llama3" and cfg["llama-linear-rope-mqa"].rope_factor == 2.5
    assert cfg["llama-headdim16-gqa4"].d_attn == 128 != cfg["llama-headdim16-gqa4"].d_model
    assert cfg["qwen3-gqa2-headdim16"].qk_norm and cfg["qwen3-gqa2-headdim16"].d_head == 16
    g2 = cfg["gemma2-alternating-capped"]
    assert (g2.norm, g2.mlp, g2.sliding_layers, g2.attn_softcap, g2.logit_softcap) == ("peri", "geglu", (0, 2), 2.0, 3.0)
    assert g2.score_scale == 12 ** -0.5 and g2.embed_scale == 32 ** 0.5
    assert cfg["gemma2-types-uncapped-mqa"].sliding_layers == (1, 2)
    q2, q3 = cfg["qwen2-window4-from-layer1"], cfg["qwen3-window3-types"]  # used to be refused
    assert (q2.sliding_window, q2.sliding_layers, q3.sliding_window, q3.sliding_layers) == (4, (1,), 3, (0, 2))
    assert cfg["phi3-window5-partial-tied"].rotary_dim == 4 and cfg["phi3-window5-partial-tied"].sliding_window == 5
    assert cfg["phi-partial04-qknorm-gqa"].rotary_dim == 4 and cfg["phi-partial04-qknorm-gqa"].norm == "parallel"
    assert cfg["neox-parallel-rot025"].rotary_dim == 4 and cfg["neox-sequential-tied-full"].norm == "pre"
    assert cfg["opt-post-ln-untied"].norm == "post" and cfg["opt-pre-ln"].mlp == "relu"
    g3 = cfg["gemma3-pattern3-mqa"]
    assert (g3.sliding_layers, g3.rope_base, g3.rope_local_base, g3.qk_norm, g3.logit_softcap, g3.attn_softcap) == (
        (0, 1, 3), 1000.0, 30.0, True, 2.5, None)
    b4, b6 = cfg["bloom-4heads-untied"], cfg["bloom-6heads"]
    assert (b4.positional, b4.embed_norm, b4.mlp, b4.tie_embeddings, b6.n_heads, b6.norm_eps) == (
        "alibi", True, "gelu_tanh", False, 6, 1e-6)
    neo, local = cfg["neo-alternating-window4"], cfg["neo-local-untied-relu"]
    assert (neo.sliding_window, neo.sliding_layers, neo.score_scale, neo.mlp) == (4, (1, 3), 1.0, "gelu_tanh")
    assert (local.sliding_layers, local.d_mlp, local.mlp, local.tie_embeddings) == ((0, 1), 40, "relu", False)


def test_what_each_mechanism_changes(folders):
    """Switching a mechanism off moves the logits: the grid would notice a converter or model that ignored it."""
    import torch

    for name, change in [("llama-llama3-rope", dict(rope_scaling="none")), ("gemma2-alternating-capped",
                         dict(attn_softcap=None)), ("gemma2-alternating-capped", dict(sliding_layers=None)),
                         ("phi-partial05", dict(rotary_dim=None)), ("opt-pre-ln", dict(mlp="gelu")),
                         ("qwen2-window4-from-layer1", dict(sliding_window=None, sliding_layers=None)),
                         ("qwen3-window3-types", dict(sliding_layers=None)),
                         ("neo-alternating-window4", dict(sliding_layers=None, sliding_window=None)),
                         ("neo-alternating-window4", dict(attn_scale=None)),
                         ("bloom-6heads", dict(positional="none")),
                         ("gemma3-pattern3-mqa", dict(rope_local_base=None))]:
        lm = load_hf_folder(folders[name])
        ids = lm.encode(G.TEXT).ids
        other = type(lm.model)(lm.cfg.replace(**change))
        other.load_state_dict(lm.model.state_dict())
        with torch.no_grad():
            assert (other(ids).logits - lm.model(ids).logits).abs().max() > 1e-3, (name, change)


@pytest.mark.parametrize("name", ["llama-llama3-rope", "qwen3-gqa2-headdim16", "qwen3-window3-types", "gemma-gqa2-headdim16",
                                  "gemma2-alternating-capped", "phi3-window5-partial-tied", "phi-partial04-qknorm-gqa",
                                  "neox-parallel-rot025", "opt-post-ln-untied", "neo-alternating-window4",
                                  "bloom-6heads", "gemma3-pattern3-mqa"])
def test_attnlab_check(folders, name):
    lm = load_hf_folder(folders[name])
    report = run_checks(lm, lm.encode(G.TEXT))
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]
    assert {c["name"] for c in report["checks"]} >= {"eager_vs_sdpa", "eager_vs_flash"}


def test_gpt_neo_files_with_the_old_mask_buffers_convert(folders):
    """EleutherAI's 2021 GPT-Neo files store each layer's causal/local mask (attn.attention.bias) and masked_bias:
    read as buffers, not weights, the conversion is the same."""
    import torch
    from attnlab.model.checkpoint import read_config
    from attnlab.model.families import FAMILIES
    from attnlab.model.hf.load import read_weights

    folder = folders["neo-alternating-window4"]
    state, row = read_weights(folder), FAMILIES["gpt_neo"]
    cfg = row.config(read_config(folder), list(state))
    old = dict(state)
    for i in range(cfg.n_layers):
        old[f"transformer.h.{i}.attn.attention.bias"] = torch.tril(torch.ones(64, 64, dtype=torch.bool))[None, None]
        old[f"transformer.h.{i}.attn.attention.masked_bias"] = torch.tensor(-1e9)
    new, ours = row.convert(state, cfg), row.convert(old, cfg)
    assert new.keys() == ours.keys() and all(torch.equal(new[k], ours[k]) for k in new)


def test_bloom_padded_batch_equals_each_text_alone(folders):
    """ALiBi with padding on the left: each row of a padded batch gives the logits of its text run alone, as
    transformers' BLOOM does (it counts key positions over the real tokens; ours are distances, the same)."""
    import torch
    from attnlab.model.parity import load_transformers

    lm = load_hf_folder(folders["bloom-6heads"])
    hf = load_transformers(lm)
    long, short = lm.encode(G.TEXT).ids[0, :9], lm.encode(G.TEXT).ids[0, 2:7]  # [9], [5]
    ids = torch.stack([long, torch.cat([torch.zeros(4, dtype=torch.long), short])])  # [2, 9]: row 1 left-padded
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, :4] = False
    with torch.no_grad():
        ours = lm.model(ids, attention_mask=real, backend="sdpa").logits  # [2, 9, V]
        alone = lm.model(short[None], backend="sdpa").logits[0]  # [5, V]
        theirs = hf(input_ids=ids, attention_mask=real.long()).logits
    assert (ours[1, 4:] - alone).abs().max() < 1e-5
    assert (ours[:, 4:] - theirs[:, 4:]).abs().max() < 1e-5 and (ours[0] - theirs[0]).abs().max() < 1e-5


def test_gemma3_files_of_older_transformers_read_the_same(folders, tmp_path):
    """A Gemma 3 config.json as transformers 4.5x wrote it (rope_theta, rope_local_base_freq, rope_scaling and
    sliding_window_pattern; no rope_parameters, no layer_types) reads as the same model, and transformers agrees."""
    import json
    import shutil

    src = folders["gemma3-pattern3-mqa"]
    old = tmp_path / "gemma3-old"
    shutil.copytree(src, old)
    conf = json.loads((old / "config.json").read_text())
    ropes = conf.pop("rope_parameters")
    conf.pop("layer_types")
    conf |= {"rope_theta": ropes["full_attention"]["rope_theta"], "rope_scaling": None, "sliding_window_pattern": 3,
             "rope_local_base_freq": ropes["sliding_attention"]["rope_theta"]}
    (old / "config.json").write_text(json.dumps(conf))
    assert load_hf_folder(old).cfg == load_hf_folder(src).cfg
    G.assert_parity(G.parity(old, backends=("sdpa",)))


def test_gemma3_rope_per_layer_reaches_every_reader(folders):
    """The local RoPE is each sliding layer's everywhere a layer's RoPE is rebuilt: the positions page's
    frequencies name it, QK attribution's parts sum to the captured score in a local and a global layer."""
    from attnlab.analysis.machinery.positions import rope_frequencies
    from attnlab.analysis.probes.qk_attribution import qk_attribution

    lm = load_hf_folder(folders["gemma3-pattern3-mqa"])
    f = rope_frequencies(lm.cfg)
    assert (f["base"], f["local_base"], f["local_layers"]) == (1000.0, 30.0, (0, 1, 3))
    inp = lm.encode(G.TEXT)
    for layer in (1, 2):  # sliding (local RoPE), full (global)
        a = qk_attribution(lm, inp, layer, 0, 7, 6)
        want = lm.forward(inp, backend="eager").capture[f"blocks.{layer}.attn"].scores(0)[7, 6]
        assert a.score == pytest.approx(float(want), abs=1e-5) and abs(a.total - a.score) < 1e-4, (layer, a)
