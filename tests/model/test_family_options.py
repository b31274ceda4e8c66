"""Options that used to be refused, now converted, each at parity with transformers in float32 (logits ≤ 1e-5,
attention ≤ 1e-6, every backend): llama attention_bias / mlp_bias, GPT-NeoX attention_bias=false and gelu_fast,
GPT-2's scale_attn_by_inverse_layer_idx and scale_attn_weights=False, OPT-350m's projected embeddings
(word_embed_proj_dim ≠ hidden_size, pre- and post-LN), DistilBERT with relu, BART with
decoder_ffn_dim ≠ encoder_ffn_dim, yarn RoPE (llama) and longrope (Phi-3, short and long factors) — their captured
scores equal transformers' q·kᵀ·scaling after its RoPE."""

from __future__ import annotations

import math

import pytest
import torch
from attnlab.analysis.machinery.checks import run_checks
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G

_D = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, max_position_embeddings=64,
          num_attention_heads=4, num_key_value_heads=2)
_GPT2 = dict(n_embd=24, n_head=3, n_layer=3, n_positions=40)
_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
_SHORT, _LONG = [1.0, 1.25, 1.5, 2.0], [2.0, 3.0, 5.0, 8.0]  # per rotary pair (d_head 8 → 4)
GRID = {
    # name: (model_type, transformers class, config kwargs)
    "llama-attention-bias": ("llama", "LlamaForCausalLM", dict(_D, attention_bias=True)),
    "llama-attention-and-mlp-bias": ("llama", "LlamaForCausalLM", dict(_D, attention_bias=True, mlp_bias=True)),
    "qwen3-attention-bias": ("qwen3", "Qwen3ForCausalLM", dict(_D, head_dim=16, attention_bias=True)),
    "gpt2-inverse-layer-idx": ("gpt2", "GPT2LMHeadModel", dict(_GPT2, scale_attn_by_inverse_layer_idx=True)),
    "gpt2-unscaled": ("gpt2", "GPT2LMHeadModel", dict(_GPT2, scale_attn_weights=False)),
    "gpt2-unscaled-inverse-layer-idx": ("gpt2", "GPT2LMHeadModel", dict(_GPT2, scale_attn_weights=False,
                                                                        scale_attn_by_inverse_layer_idx=True)),
    "neox-no-attention-bias": ("gpt_neox", "GPTNeoXForCausalLM", dict(G.TINY["gpt_neox"][1], attention_bias=False,
                                                                     hidden_act="gelu_new")),
    "neox-gelu-fast": ("gpt_neox", "GPTNeoXForCausalLM", dict(G.TINY["gpt_neox"][1], hidden_act="gelu_fast")),
    "distilbert-relu": ("distilbert", "DistilBertForMaskedLM", dict(G.TINY["distilbert"][1], activation="relu")),
    "bart-ffn-40-56": ("bart", "BartForConditionalGeneration", dict(G.TINY["bart"][1], decoder_ffn_dim=56)),
    "opt-350m-projected": ("opt", "OPTForCausalLM", dict(G.TINY["opt"][1], word_embed_proj_dim=16,
                                                        do_layer_norm_before=False)),  # OPT-350m's layout
    "opt-projected-pre-ln": ("opt", "OPTForCausalLM", dict(G.TINY["opt"][1], word_embed_proj_dim=16)),
    "llama-yarn": ("llama", "LlamaForCausalLM", dict(_D, rope_parameters=_YARN)),
    "llama-yarn-mscale-beta": ("llama", "LlamaForCausalLM", dict(_D, rope_parameters=dict(
        _YARN, factor=8.0, mscale=0.7, mscale_all_dim=0.3, beta_fast=16, beta_slow=2, truncate=False))),
    "phi3-longrope-short": ("phi3", "Phi3ForCausalLM", dict(_D, pad_token_id=None, original_max_position_embeddings=32,
                                                            rope_scaling={"type": "longrope", "short_factor": _SHORT,
                                                                          "long_factor": _LONG})),
    "phi3-longrope-long": ("phi3", "Phi3ForCausalLM", dict(_D, pad_token_id=None, original_max_position_embeddings=8,
                                                           rope_scaling={"type": "longrope", "short_factor": _SHORT,
                                                                         "long_factor": _LONG})),
}
TOL_LOGITS, TOL_ATTENTION, TOL_SCORES = 1e-5, 1e-6, 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    return {n: G.make(root / n, mt, cls, seed=i, **conf) for i, (n, (mt, cls, conf)) in enumerate(GRID.items())}


@pytest.mark.parametrize("name", list(GRID))
def test_parity_every_backend(folders, name):
    worst = G.assert_parity(G.parity(folders[name]))
    assert worst["max_abs_attention"] <= TOL_ATTENTION and (worst["max_abs_logits"] or 0.0) <= TOL_LOGITS, worst


def test_each_option_is_the_mechanism(folders):
    cfg = {n: load_hf_folder(folders[n]).cfg for n in GRID}
    assert cfg["llama-attention-bias"].attn_bias and cfg["llama-attention-bias"].attn_out_bias
    assert not cfg["llama-attention-bias"].mlp_biases and cfg["llama-attention-and-mlp-bias"].mlp_biases
    lm = load_hf_folder(folders["gpt2-inverse-layer-idx"])
    run = lm.run(G.TEXT)
    for i in range(3):  # layer i: 1/(√8 · (i + 1))
        assert run[f"blocks.{i}.attn"].scale == pytest.approx(8 ** -0.5 / (i + 1), rel=1e-12)
    assert load_hf_folder(folders["gpt2-unscaled"]).run(G.TEXT)["blocks.2.attn"].scale == 1.0
    assert cfg["distilbert-relu"].mlp == "relu" and cfg["bart-ffn-40-56"].dec_d_mlp == 56
    neox = cfg["neox-no-attention-bias"]  # was refused: "attention_bias=false is not supported"
    assert not neox.attn_bias and not neox.attn_out_bias and neox.mlp_biases
    assert cfg["neox-gelu-fast"].mlp == "gelu_tanh"  # was refused: "activation 'gelu_fast' is not supported"
    yarn = cfg["llama-yarn"]
    assert (yarn.rope_scaling, yarn.rope_factor, yarn.rope_original_len) == ("yarn", 4.0, 16)
    assert yarn.rope_attn_factor == pytest.approx(0.1 * math.log(4.0) + 1)
    assert cfg["llama-yarn-mscale-beta"].rope_attn_factor == pytest.approx((0.07 * math.log(8) + 1) /
                                                                            (0.03 * math.log(8) + 1))
    long = cfg["phi3-longrope-long"]
    assert long.rope_long == tuple(_LONG) and long.rope_attn_factor == pytest.approx(
        math.sqrt(1 + math.log(64 / 8) / math.log(8)))


def _hf_scores(folder, ids) -> list[torch.Tensor]:
    """transformers' own pre-softmax scores per layer [H, T, T]: q·kᵀ·scaling of its q and k after its RoPE
    (its rotary embedding, cos and sin × its attention factor)."""
    import transformers
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    inputs = {}
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, a, kw, i=i: inputs.__setitem__(i, kw["hidden_states"]),
                                                       with_kwargs=True) for i, layer in enumerate(hf.model.layers)]
    with torch.no_grad():
        hf(ids)
        out = []
        cos, sin = hf.model.rotary_emb(inputs[0], torch.arange(ids.shape[1])[None])
        for i, layer in enumerate(hf.model.layers):
            a, x, c = layer.self_attn, inputs[i], hf.config
            d = c.hidden_size // c.num_attention_heads
            if hasattr(a, "qkv_proj"):  # Phi-3: rows q | k | v
                q, k, _ = a.qkv_proj(x).split([c.num_attention_heads * d, c.num_key_value_heads * d,
                                               c.num_key_value_heads * d], -1)
            else:
                q, k = a.q_proj(x), a.k_proj(x)
            q = q.view(1, -1, c.num_attention_heads, d).transpose(1, 2)  # [1, H, T, d]
            k = k.view(1, -1, c.num_key_value_heads, d).transpose(1, 2)  # [1, Hkv, T, d]
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            k = repeat_kv(k, c.num_attention_heads // c.num_key_value_heads)
            out.append((q @ k.transpose(-1, -2) * a.scaling)[0])  # [H, T, T]
    for h in hooks:
        h.remove()
    return out


@pytest.mark.parametrize("name", ["llama-yarn", "llama-yarn-mscale-beta", "phi3-longrope-short", "phi3-longrope-long"])
def test_captured_scores_are_transformers_own(folders, name):
    lm = load_hf_folder(folders[name])
    inputs = lm.encode(G.TEXT)
    assert inputs.ids.shape[1] > 8  # phi3-longrope-long reaches past its original length: the long factors
    for backend in ("eager", "sdpa"):
        run = lm.capture(inputs, backend=backend)
        for i, want in enumerate(_hf_scores(folders[name], inputs.ids)):
            got = torch.from_numpy(run[f"blocks.{i}.attn"].scores())  # [H, T, T]
            assert (got - want).abs().max() <= TOL_SCORES * max(1.0, float(want.abs().max())), (name, backend, i)


def test_long_factors_are_used_past_the_original_length(folders):
    """The same weights read with the short factors would give other scores (the check can fail)."""
    lm = load_hf_folder(folders["phi3-longrope-long"])
    inputs = lm.encode(G.TEXT)
    want = _hf_scores(folders["phi3-longrope-long"], inputs.ids)[0]
    other = type(lm.model)(lm.cfg.replace(rope_long=lm.cfg.rope_short)).eval()
    other.load_state_dict(lm.model.state_dict())
    lm.model = other
    got = torch.from_numpy(lm.capture(inputs)["blocks.0.attn"].scores())
    assert (got - want).abs().max() > 1e-3


def test_one_model_switches_factors_between_forwards(folders):
    """The frequencies are kept per kind: a short text (short factors) and then a long one (long factors) on one
    model each get transformers' own scores, and the short again after the long."""
    lm = load_hf_folder(folders["phi3-longrope-long"])
    short, long = lm.encode("the cat"), lm.encode(G.TEXT)
    assert short.ids.shape[1] <= 8 < long.ids.shape[1]  # original_max_position_embeddings = 8
    for inputs in (short, long, short):
        want = _hf_scores(folders["phi3-longrope-long"], inputs.ids)[1]
        got = torch.from_numpy(lm.capture(inputs, backend="sdpa")["blocks.1.attn"].scores())
        assert (got - want).abs().max() <= TOL_SCORES * max(1.0, float(want.abs().max()))
    assert sorted(k[2] for k in lm.model._rope_freqs) == [False, True]  # made once per kind, then kept


@pytest.mark.parametrize("name", ["gpt2-inverse-layer-idx", "llama-attention-and-mlp-bias", "llama-yarn",
                                  "phi3-longrope-short", "phi3-longrope-long", "bart-ffn-40-56"])
def test_attnlab_check(folders, name):
    """eager ≡ sdpa ≡ flash and cached ≡ uncached; phi3-longrope-short's greedy run crosses its original length
    (32) and recomputes once, as transformers' generation does."""
    lm = load_hf_folder(folders[name])
    report = run_checks(lm, lm.encode_reading(G.TEXT))
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]


@pytest.mark.parametrize("model_type, cls, conf, words", [
    ("bart", "BartForConditionalGeneration", dict(G.TINY["bart"][1], decoder_attention_heads=6),
     "decoder_attention_heads=6 is not supported (every attention site"),
    ("llama", "LlamaForCausalLM", dict(_D, rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
     "dynamic NTK rescales by the input's length"),
])
def test_what_stays_refused_says_why(tmp_path, model_type, cls, conf, words):
    folder = G.make(tmp_path / model_type, model_type, cls, **conf)
    with pytest.raises(CheckpointError, match=words.replace("(", r"\(")):
        load_hf_folder(folder)


def test_projected_embeddings_read_through_every_probe(folders):
    """OPT-350m's layout: hook_embed is the d_embed-wide token embedding, the readout goes through project_out —
    the patching readout equals the model's own logit difference, integrated gradients is complete, direct logit
    attribution (pre-LN) sums to the logit, QK attribution's parts sum to the captured score."""
    from attnlab.analysis.machinery.block_walk import block_walk
    from attnlab.analysis.probes.attributions import integrated_gradients
    from attnlab.analysis.probes.dla import direct_logit_attribution
    from attnlab.analysis.probes.patching import activation_patching
    from attnlab.analysis.probes.qk_attribution import qk_attribution
    from attnlab.analysis.probes.readout import answer_id

    for name in ("opt-350m-projected", "opt-projected-pre-ln"):
        lm = load_hf_folder(folders[name])
        assert (lm.cfg.d_embed, lm.cfg.project_tokens, lm.cfg.d_model) == (16, True, 32)
        assert lm.cfg.norm == ("post" if name == "opt-350m-projected" else "pre")
        fwd = lm.forward(lm.encode(G.TEXT), names=["hook_embed", "hook_pos_embed"])
        assert fwd.capture.tensor("hook_embed").shape[-1] == 16 and fwd.capture.tensor("hook_pos_embed").shape[-1] == 32
        assert fwd.hidden.shape[-1] == 16  # projected back, as transformers' last hidden state
        clean, corrupt = "the cat sat on the mat", "the mat sat on the cat"  # the same tokens, reordered
        ids = lm.encode(clean).ids[0]
        logits = lm.forward(lm.encode(clean)).logits[0, -1]
        a, b = answer_id(lm, "cat"), answer_id(lm, "mat")
        p = activation_patching(lm, clean, corrupt, "cat", "mat")
        assert p.ld_clean == pytest.approx(float(logits[a] - logits[b]), abs=1e-4)
        assert p.all_restored == pytest.approx(1.0, abs=1e-5)
        assert p.ld_corrupt != pytest.approx(p.ld_clean, abs=1e-3)
        ig = integrated_gradients(lm, lm.encode(clean), -1, a)  # along the d_embed-wide token embeddings
        assert ig.completeness_error <= 0.01 and ig.logit == pytest.approx(float(logits[a]), abs=1e-4)
        assert block_walk(lm, lm.encode(clean)).max_abs_vs_model <= 1e-5  # the walk reads through project_out
        q = qk_attribution(lm, lm.encode(clean), layer=1, head=1, query=len(ids) - 1)
        assert float(q.values.sum()) == pytest.approx(q.score, abs=1e-4)
    dla = direct_logit_attribution(lm, clean, "cat")  # pre-LN: the stream is a sum
    assert dla.total == pytest.approx(dla.logit, abs=1e-4)
