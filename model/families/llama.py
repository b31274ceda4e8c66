"""Llama (LlamaForCausalLM) and the layout Qwen2, Mistral and Mixtral share → our ModelConfig and state dict.

The three families share one layout: pre-RMSNorm decoder, rotate-half RoPE, SwiGLU MLP, no biases
(Qwen2: biases on q, k, v only), grouped-query attention, tied or untied LM head; Mistral adds a
sliding window, which becomes our decoder's own mask, MaskSpec("sliding_window"); Mixtral is Mistral with
mixture-of-experts MLPs (model/families/mixtral_experts.py). transformers keeps
key j visible to query i when i − W < j ≤ i (`kv_idx > q_idx - sliding_window`), exactly our
`q − k < window`: the query and W − 1 earlier keys.

RoPE: ours is rotate-half on [first half | second half] of each head, as in transformers, so the q and k
rows are copied unpermuted. Every key is accounted for and every shape asserted; anything else is a
CheckpointError naming the key. No `transformers` import here.
"""

from __future__ import annotations

from model.checkpoint import CheckpointError
from model.config import ModelConfig
from model.families.common import Mapper, State, build, lm_head, require, strip
from model.families.family import Family, fixed
from model.families.mixtral_experts import mixtral_fields, take_experts

FAMILIES = ("llama", "qwen2", "mistral", "mixtral")  # the model_types this layout reads


def llama_config(hf: dict, names=None) -> ModelConfig:
    """A Llama / Qwen2 / Mistral / Mixtral config.json dict → ModelConfig; refuses what would change the maths."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise CheckpointError(f"model_type {family!r} is not one of {', '.join(FAMILIES)}")
    require(hf, family, "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
             "intermediate_size", "max_position_embeddings")
    d, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{family}: activation {act!r} is not supported (only 'silu', as SwiGLU)")
    head_dim = hf.get("head_dim")
    if head_dim is not None and n_heads * head_dim != d:
        raise CheckpointError(f"{family}: head_dim={head_dim} with {n_heads} heads ≠ hidden_size={d} "
                              "is not supported (our heads split d_model evenly)")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key, False):
            raise CheckpointError(f"{family}: {key}=true is not supported ({family} has no such biases)")
    window = None
    if family in ("mistral", "mixtral"):
        window = hf.get("sliding_window")
    elif family == "qwen2":
        layer_types = hf.get("layer_types") or []
        if hf.get("use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
            raise CheckpointError("qwen2: use_sliding_window / sliding-attention layers are not supported "
                                  "(only full attention in every layer)")
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, n_layers=hf["num_hidden_layers"],
        d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"], positional="rope",
        rope_base=rope_theta(hf, family), norm="pre", norm_type="rmsnorm", bias=False,
        qkv_bias=True if family == "qwen2" else None, tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        output_head="lm", norm_eps=float(hf.get("rms_norm_eps", 1e-6)), sliding_window=window,
        **(mixtral_fields(hf) if family == "mixtral" else {"mlp": "swiglu"}),
    )


def rope_theta(hf: dict, family: str) -> float:
    """The RoPE base from `rope_parameters` (transformers ≥ 5) or `rope_theta` + `rope_scaling` (older
    files); any scaling (linear, dynamic, yarn, llama3, partial rotary …) is refused."""
    params = hf.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise CheckpointError(f"{family}: rope_parameters={params!r} is not a dict")
        kind = params.get("rope_type", params.get("type", "default"))
        extra = sorted(set(params) - {"rope_type", "type", "rope_theta"})
        if kind != "default" or extra:
            raise CheckpointError(f"{family}: rope_parameters {params!r} ask for RoPE scaling; only plain RoPE "
                                  "(rope_type 'default', rope_theta) is supported")
        return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    if hf.get("rope_scaling") is not None:
        raise CheckpointError(f"{family}: rope_scaling={hf['rope_scaling']!r} is not supported (only null)")
    return float(hf.get("rope_theta", 10000.0))


def convert_llama(hf_state: State, cfg: ModelConfig, family: str = "llama") -> State:
    """LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM (or their base models, without the
    `model.` prefix) tensors → ours. q_proj, k_proj, v_proj are stacked into our fused qkv."""
    s = strip(hf_state, "model.", "embed_tokens.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    d_kv = cfg.kv_heads * cfg.d_head
    m = Mapper(s, family)
    m.take("embed_tokens.weight", "embed.tok.weight", (V, D))
    for i in range(cfg.n_layers):
        h, b = f"layers.{i}.", f"blocks.{i}."
        m.take(h + "input_layernorm.weight", b + "ln_attn.weight", (D,))
        m.take(h + "post_attention_layernorm.weight", b + "ln_mlp.weight", (D,))
        a = h + "self_attn."
        shapes = {"q_proj": D, "k_proj": d_kv, "v_proj": d_kv}
        # rows [0:D] q, [D:D+d_kv] k, [D+d_kv:] v
        m.fused_qkv([a + n for n in shapes], list(shapes.values()), b + "attn.qkv", D, bias=cfg.attn_bias)
        if not cfg.attn_bias and any(a + n + ".bias" in m.rest for n in shapes):
            raise CheckpointError(f"{family}: the checkpoint has attention biases ({a}q_proj.bias …) "
                                  f"but {family} has none")
        m.take(a + "o_proj.weight", b + "attn.out.weight", (D, D))
        if cfg.mlp == "moe":  # Mixtral: a router and n_experts SwiGLU experts (model/families/mixtral_experts.py)
            take_experts(m, h, b, cfg)
        else:
            m.take(h + "mlp.gate_proj.weight", b + "mlp.gate.weight", (H, D))
            m.take(h + "mlp.up_proj.weight", b + "mlp.up.weight", (H, D))
            m.take(h + "mlp.down_proj.weight", b + "mlp.down.weight", (D, H))
        m.ignore(a + "rotary_emb.inv_freq")  # old checkpoints saved the RoPE frequencies (recomputed here)
    m.take("norm.weight", "ln_f.weight", (D,))
    m.ignore("rotary_emb.inv_freq")
    lm_head(m, hf_state, cfg, family)
    return m.done()


FAMILY = Family("llama", "Llama, TinyLlama, SmolLM and other LlamaForCausalLM checkpoints", llama_config, convert_llama,
                fixed("LlamaForCausalLM"), {"bos": "<s>", "eos": "</s>"})
