"""Phi-1, Phi-1.5 and Phi-2 (PhiForCausalLM): parallel attention and MLP reading one shared LayerNorm (ours:
norm "parallel" with that norm's weights in both ln_attn and ln_mlp), partial rotary, biases everywhere (the LM
head too), a GELU (tanh) MLP, optional LayerNorm over each head's q and k."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, lm_head, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.rope_params import rope_fields


def phi_config(hf: dict, names=None) -> ModelConfig:
    """A Phi config.json dict → ModelConfig."""
    hf = with_defaults(hf, "phi")
    require(hf, "phi", "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
            "intermediate_size", "max_position_embeddings")
    d, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, n_layers=hf["num_hidden_layers"],
        d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"], positional="rope",
        **rope_fields(hf, "phi", d // n_heads), norm="parallel", norm_type="layernorm", bias=True,
        mlp=activation(hf.get("hidden_act", "gelu_new"), "phi"), qk_norm=bool(hf.get("qk_layernorm", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), output_head="lm", lm_head_bias=True,
        norm_eps=float(hf.get("layer_norm_eps", 1e-5)), qkv_layout="split")


def convert_phi(hf_state: State, cfg: ModelConfig) -> State:
    """PhiForCausalLM (or PhiModel, without `model.`) tensors → ours."""
    s = strip(hf_state, "model.", "embed_tokens.weight")
    D, H, V, d_kv = cfg.d_model, cfg.hidden, cfg.vocab_size, cfg.kv_heads * cfg.d_head
    m = Mapper(s, "phi")
    m.take("embed_tokens.weight", "embed.tok.weight", (V, D))
    for i in range(cfg.n_layers):
        h, b, a = f"layers.{i}.", f"blocks.{i}.", f"layers.{i}.self_attn."
        w, bias = m.pop(h + "input_layernorm.weight", (D,)), m.pop(h + "input_layernorm.bias", (D,))
        for dst in ("ln_attn", "ln_mlp"):  # one norm feeds both branches
            m.out[b + dst + ".weight"], m.out[b + dst + ".bias"] = w.clone(), bias.clone()
        m.qkv([a + n for n in ("q_proj", "k_proj", "v_proj")], [D, d_kv, d_kv], b + "attn", D, cfg, bias=True)
        m.linear(a + "dense", b + "attn.out", (D, D))
        if cfg.qk_norm:
            m.norm(a + "q_layernorm", b + "attn.q_norm", cfg.d_head)
            m.norm(a + "k_layernorm", b + "attn.k_norm", cfg.d_head)
        m.linear(h + "mlp.fc1", b + "mlp.up", (H, D))
        m.linear(h + "mlp.fc2", b + "mlp.down", (D, H))
    m.norm("final_layernorm", "ln_f", D)
    lm_head(m, hf_state, cfg, "phi")
    m.take("lm_head.bias", "lm_head.bias", (V,))
    return m.done()


FAMILY = Family("phi", "Phi-1, Phi-1.5 and Phi-2 (PhiForCausalLM checkpoints)", phi_config, convert_phi,
                fixed("PhiForCausalLM"), {"bos": "<|endoftext|>", "eos": "<|endoftext|>"},
                runs_in_transformers=bare_untied)
