"""Hugging Face T5 checkpoints (T5ForConditionalGeneration, T5 v1.1, Flan-T5 layouts) → our ModelConfig
(arch="encdec") and state dict. Pure functions; no `transformers` import.

T5 differs from the textbook encoder–decoder in four ways, each a ModelConfig choice:
- no positions added to the embeddings; each stack's layer 0 owns a table of per-head biases by bucketed
  relative distance (positional="relative", `rel_buckets`, `rel_max_distance`), added to every self-attention
  layer's scores of that stack (encoder: bidirectional buckets; decoder: causal ones); cross-attention none;
- no 1/√d scaling of q·kᵀ (attn_scale=1.0): the records keep raw q·k, the bias and their sum apart;
- RMSNorm without bias (T5's LayerNorm), pre-norm, a final norm per stack, no biases anywhere;
- the MLP is ReLU (original T5) or gated tanh-GELU (v1.1, Flan-T5: geglu); gated SiLU is swiglu.
The shared embedding is copied into both stacks and into the LM head when the checkpoint has none; the original
T5 multiplies the decoder's output by d_model^-0.5 before the LM head (`logit_scale`), v1.1 and Flan-T5 do not.
"""

from __future__ import annotations

import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, build, refuse, require
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed

FAMILIES = ("t5",)
CLASSES = {"t5": "T5ForConditionalGeneration"}
SPECIALS = {"t5": {"eos": "</s>", "pad": "<pad>"}}
# feed_forward_proj → our MLP
MLPS = {"relu": "relu", "gelu": "gelu", "gated-gelu": "geglu", "gated-gelu_new": "geglu", "gated-silu": "swiglu"}


def decoder_start(hf: dict) -> int:
    """The id every target starts with (T5: the pad token)."""
    return int(hf.get("decoder_start_token_id", hf.get("pad_token_id", 0)) or 0)


def t5_config(hf: dict) -> ModelConfig:
    """A T5 config.json dict → ModelConfig; refuses what would change the maths."""
    require(hf, "t5", "vocab_size", "d_model", "num_heads", "num_layers", "d_ff")
    refuse(hf, "t5", is_decoder=(False, False), is_encoder_decoder=(True, True))
    d, heads = hf["d_model"], hf["num_heads"]
    d_kv = int(with_defaults(hf, "t5")["d_kv"])  # Flan-T5 small, T5 v1.1: heads·d_kv ≠ d_model
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in MLPS:
        raise CheckpointError(f"t5: feed_forward_proj={proj!r} is not supported (supported: {', '.join(MLPS)})")
    return build(
        arch="encdec", vocab_size=hf["vocab_size"], d_model=d, n_heads=heads, head_dim=d_kv, n_layers=hf["num_layers"],
        n_dec_layers=hf.get("num_decoder_layers") or hf["num_layers"], d_mlp=hf["d_ff"],
        max_len=int(hf.get("n_positions", 512)), positional="relative",
        rel_buckets=int(hf.get("relative_attention_num_buckets", 32)),
        rel_max_distance=int(hf.get("relative_attention_max_distance", 128)), attn_scale=1.0, norm="pre",
        norm_type="rmsnorm", mlp=MLPS[proj], bias=False, tie_embeddings=False, output_head="lm",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-6)), logit_scale=d ** -0.5 if scales_output(hf) else 1.0,
        qkv_layout="split",
    )


def scales_output(hf: dict) -> bool:
    """Whether T5 multiplies the decoder output by d_model^-0.5 before the LM head (original T5: yes)."""
    if "scale_decoder_outputs" in hf:
        return bool(hf["scale_decoder_outputs"])
    return hf.get("tie_word_embeddings", True) is not False


def convert_t5(hf_state: State, cfg: ModelConfig) -> State:
    """T5ForConditionalGeneration (or T5Model) tensors → ours."""
    D, H, V, A = cfg.d_model, cfg.hidden, cfg.vocab_size, cfg.d_attn  # A = heads·d_kv
    m = Mapper(hf_state, "t5")
    shared = m.pop("shared.weight", (V, D))
    for stack in ("encoder", "decoder"):
        m.out[f"{stack}.embed.tok.weight"] = shared
        emb = m.rest.pop(f"{stack}.embed_tokens.weight", None)  # tied to shared when saved at all
        if emb is not None and not torch.equal(emb, shared):
            raise CheckpointError(f"t5: {stack}.embed_tokens.weight differs from shared.weight")
        n = cfg.n_layers if stack == "encoder" else cfg.dec_layers
        m.take(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
               f"{stack}.rel_bias.weight", (cfg.rel_buckets, cfg.n_heads))
        for i in range(n):
            h, b = f"{stack}.block.{i}.layer.", f"{stack}.blocks.{i}."
            m.qkv([h + f"0.SelfAttention.{n}" for n in "qkv"], [A, A, A], b + "attn", D, cfg, bias=False)  # as stored
            m.take(h + "0.SelfAttention.o.weight", b + "attn.out.weight", (D, A))
            m.take(h + "0.layer_norm.weight", b + "ln_attn.weight", (D,))
            ff = 1
            if stack == "decoder":
                a = h + "1.EncDecAttention."
                m.take(a + "q.weight", b + "cross_attn.q.weight", (A, D))
                m.qkv([a + "k", a + "v"], [A, A], b + "cross_attn", D, cfg, parts="kv", bias=False)
                m.take(a + "o.weight", b + "cross_attn.out.weight", (D, A))
                m.take(h + "1.layer_norm.weight", b + "ln_cross.weight", (D,))
                m.ignore(a + "relative_attention_bias.weight")  # old checkpoints: never used by cross-attention
                ff = 2
            f = f"{h}{ff}.DenseReluDense."
            if cfg.mlp in ("geglu", "swiglu"):
                m.take(f + "wi_0.weight", b + "mlp.gate.weight", (H, D))
                m.take(f + "wi_1.weight", b + "mlp.up.weight", (H, D))
            else:
                m.take(f + "wi.weight", b + "mlp.up.weight", (H, D))
            m.take(f + "wo.weight", b + "mlp.down.weight", (D, H))
            m.take(f"{h}{ff}.layer_norm.weight", b + "ln_mlp.weight", (D,))
        m.take(f"{stack}.final_layer_norm.weight", f"{stack}.ln_f.weight", (D,))
    m.out["decoder.lm_head.weight"] = m.pop("lm_head.weight", (V, D)) if "lm_head.weight" in m.rest else shared
    return m.done()


FAMILY = Family("t5", "T5, T5 v1.1, Flan-T5 and other T5ForConditionalGeneration checkpoints",
                lambda hf, names=None: t5_config(hf), convert_t5, fixed("T5ForConditionalGeneration"), SPECIALS["t5"],
                runs_in_transformers=lambda hf: hf.get("is_encoder_decoder", True) is False)  # T5EncoderModel
