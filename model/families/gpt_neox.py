"""GPT-NeoX and Pythia (GPTNeoXForCausalLM): parallel residual (attention and MLP read x through their own
LayerNorms: our norm "parallel"; sequential pre-LN when use_parallel_residual is false), partial rotary, biases,
and q, k, v fused per head: query_key_value's rows are [head][q | k | v][d_head], ours [q | k | v][head][d_head]."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, lm_head, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.rope_params import rope_fields


def gpt_neox_config(hf: dict, names=None) -> ModelConfig:
    """A GPT-NeoX config.json dict → ModelConfig."""
    hf = with_defaults(hf, "gpt_neox")
    require(hf, "gpt_neox", "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
            "intermediate_size", "max_position_embeddings")
    attn_bias = bool(hf.get("attention_bias", True))  # query_key_value's and dense's biases
    d, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=n_heads, n_layers=hf["num_hidden_layers"],
        d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"], positional="rope",
        **rope_fields(hf, "gpt_neox", d // n_heads), norm="parallel" if hf.get("use_parallel_residual", True) else "pre",
        norm_type="layernorm", bias=True, qkv_bias=attn_bias, out_bias=attn_bias, mlp=activation(hf.get("hidden_act", "gelu"), "gpt_neox"),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), output_head="lm",
        norm_eps=float(hf.get("layer_norm_eps", 1e-5)))


def convert_gpt_neox(hf_state: State, cfg: ModelConfig) -> State:
    """GPTNeoXForCausalLM (or GPTNeoXModel, without `gpt_neox.`) tensors → ours; the LM head is `embed_out`
    in older files, `lm_head` in newer ones."""
    state = dict(hf_state)
    if "embed_out.weight" in state:
        state["lm_head.weight"] = state.pop("embed_out.weight")
    s = strip(state, "gpt_neox.", "embed_in.weight")
    D, H, V, n, d = cfg.d_model, cfg.hidden, cfg.vocab_size, cfg.n_heads, cfg.d_head
    m = Mapper(s, "gpt_neox")
    m.take("embed_in.weight", "embed.tok.weight", (V, D))
    for i in range(cfg.n_layers):
        h, b, a = f"layers.{i}.", f"blocks.{i}.", f"layers.{i}.attention."
        m.norm(h + "input_layernorm", b + "ln_attn", D)
        m.norm(h + "post_attention_layernorm", b + "ln_mlp", D)
        w = m.pop(a + "query_key_value.weight", (3 * D, D))
        m.out[b + "attn.qkv.weight"] = w.view(n, 3, d, D).transpose(0, 1).reshape(3 * D, D)  # [H,3,d,D] -> [3,H,d,D]
        if cfg.attn_bias:
            qkv_b = m.pop(a + "query_key_value.bias", (3 * D,))
            m.out[b + "attn.qkv.bias"] = qkv_b.view(n, 3, d).transpose(0, 1).reshape(3 * D)  # [H,3,d] -> [3,H,d]
        m.take(a + "dense.weight", b + "attn.out.weight", (D, D))
        if cfg.attn_out_bias:
            m.take(a + "dense.bias", b + "attn.out.bias", (D,))
        m.ignore(a + "bias", a + "masked_bias", a + "rotary_emb.inv_freq")  # old checkpoints' buffers
        m.linear(h + "mlp.dense_h_to_4h", b + "mlp.up", (H, D))
        m.linear(h + "mlp.dense_4h_to_h", b + "mlp.down", (D, H))
    m.norm("final_layer_norm", "ln_f", D)
    lm_head(m, state, cfg, "gpt_neox", "embed_in.weight")
    return m.done()


FAMILY = Family("gpt_neox", "GPT-NeoX, Pythia and other GPTNeoXForCausalLM checkpoints", gpt_neox_config,
                convert_gpt_neox, fixed("GPTNeoXForCausalLM"), {"bos": "<|endoftext|>", "eos": "<|endoftext|>"},
                runs_in_transformers=bare_untied)
