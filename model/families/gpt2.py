"""GPT-2 (GPT2LMHeadModel, GPT2Model): pre-LN decoder, learned positions, Conv1D weights, tied LM head."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, lm_head, refuse, require, strip
from attnlab.model.families.family import Family, fixed


def gpt2_config(hf: dict, names=None) -> ModelConfig:
    """A GPT-2 config.json dict → ModelConfig (pre-LN decoder, learned positions, tied LM head; unscaled or
    layer-scaled scores where scale_attn_weights / scale_attn_by_inverse_layer_idx ask)."""
    require(hf, "gpt2", "vocab_size", "n_embd", "n_head", "n_layer", "n_positions")
    refuse(hf, "gpt2", add_cross_attention=(False, False))
    d = hf["n_embd"]
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["n_head"], n_layers=hf["n_layer"],
        d_mlp=hf.get("n_inner") or 4 * d, max_len=hf["n_positions"], positional="learned", norm="pre",
        mlp=activation(hf.get("activation_function", "gelu_new"), "gpt2"), bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), output_head="lm",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        attn_scale=None if hf.get("scale_attn_weights", True) else 1.0,  # unscaled: q·kᵀ as it is
        scale_by_layer=bool(hf.get("scale_attn_by_inverse_layer_idx", False)),  # layer i's scale ÷ (i + 1)
    )


def convert_gpt2(hf_state: State, cfg: ModelConfig) -> State:
    """GPT2LMHeadModel / GPT2Model tensors (with or without the `transformer.` prefix) → ours."""
    s = strip(hf_state, "transformer.", "wte.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    # GPT-2 stores Linear layers as Conv1D with weight [in, out]; nn.Linear wants [out, in]: transpose.
    conv = {"attn.c_attn": ("attn.qkv", (D, 3 * D)), "attn.c_proj": ("attn.out", (D, D)),
            "mlp.c_fc": ("mlp.up", (D, H)), "mlp.c_proj": ("mlp.down", (H, D))}
    m = Mapper(s, "gpt2")
    m.take("wte.weight", "embed.tok.weight", (V, D))
    m.take("wpe.weight", "embed.pos.weight", (cfg.max_len, D))
    for i in range(cfg.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for src, dst in (("ln_1", "ln_attn"), ("ln_2", "ln_mlp")):
            m.norm(h + src, b + dst, D)
        for src, (dst, shape) in conv.items():
            m.take(h + src + ".weight", b + dst + ".weight", shape, transpose=True)
            m.take(h + src + ".bias", b + dst + ".bias", (shape[1],))
        m.ignore(h + "attn.bias", h + "attn.masked_bias")  # old checkpoints' causal-mask buffers
    m.norm("ln_f", "ln_f", D)
    lm_head(m, hf_state, cfg, "gpt2", "wte.weight")
    return m.done()


FAMILY = Family(
    "gpt2", "GPT-2, DistilGPT-2 and other GPT2LMHeadModel/GPT2Model checkpoints", gpt2_config, convert_gpt2,
    fixed("GPT2LMHeadModel"), {"bos": "<|endoftext|>", "eos": "<|endoftext|>"})
