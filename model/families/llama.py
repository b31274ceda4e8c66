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

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, build, lm_head, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.mixtral_experts import mixtral_fields, take_experts
from attnlab.model.families.rope_params import rope_fields

FAMILIES = ("llama", "qwen2", "mistral", "mixtral")  # the model_types this layout reads
BIAS_KEYS = {"llama": ("attention_bias", "mlp_bias"), "qwen3": ("attention_bias",), "gemma": ("attention_bias",),
             "gemma2": ("attention_bias",), "gemma3_text": ("attention_bias",)}  # attention_bias: q, k, v and o; mlp_bias: gate, up, down


def decoder_fields(hf: dict, family: str, tied_default: bool = False, acts: tuple[str, ...] = ("silu",)) -> dict:
    """The ModelConfig fields of the Llama layout (pre-RMSNorm, RoPE, gated MLP, GQA; biases on q, k, v and o with
    attention_bias, on the MLP with mlp_bias) from config.json; a family module overrides what differs. Refuses
    what would change the maths."""
    require(hf, family, "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
            "intermediate_size", "max_position_embeddings")
    d, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    act = hf.get("hidden_activation") or hf.get("hidden_act") or acts[0]
    if act not in acts:
        raise CheckpointError(f"{family}: activation {act!r} is not supported (only {', '.join(map(repr, acts))})")
    honoured = BIAS_KEYS.get(family, ())  # transformers reads these keys for this family only
    attn_bias = "attention_bias" in honoured and bool(hf.get("attention_bias", False))
    mlp_bias = "mlp_bias" in honoured and bool(hf.get("mlp_bias", False))
    head_dim = hf.get("head_dim") or d // n_heads
    return dict(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, n_layers=hf["num_hidden_layers"],
        d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"], positional="rope",
        head_dim=head_dim if head_dim * n_heads != d else None, **rope_fields(hf, family, head_dim), norm="pre",
        norm_type="rmsnorm", bias=False, qkv_bias=attn_bias or None, out_bias=attn_bias or None,
        mlp_bias=mlp_bias or None, mlp="swiglu",
        tie_embeddings=bool(hf.get("tie_word_embeddings", tied_default)),
        output_head="lm", norm_eps=float(hf.get("rms_norm_eps", 1e-6)), qkv_layout="split")


def qwen_windows(hf: dict, family: str) -> dict:
    """Qwen2's / Qwen3's sliding window as transformers reads it: only with use_sliding_window, on the layers
    layer_types names sliding_attention, else on those from max_window_layers on → {sliding_window,
    sliding_layers}, or {} when no layer slides. Sliding layers without a window are refused (transformers
    cannot run them either)."""
    n = hf["num_hidden_layers"]
    window = hf.get("sliding_window", 4096) if hf.get("use_sliding_window", False) else None
    types = hf.get("layer_types") or ["sliding_attention" if window is not None and i >= hf.get("max_window_layers", 28)
                                      else "full_attention" for i in range(n)]
    if len(types) != n or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise CheckpointError(f"{family}: layer_types={types!r} must name full_attention or sliding_attention "
                              f"for each of the {n} layers")
    layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if layers and window is None:
        raise CheckpointError(f"{family}: layer_types names sliding-attention layers but use_sliding_window is false "
                              "(no window to slide)")
    if not layers:
        return {}
    return {"sliding_window": int(window), "sliding_layers": None if len(layers) == n else layers}


def llama_config(hf: dict, names=None) -> ModelConfig:
    """A Llama / Qwen2 / Mistral / Mixtral config.json dict → ModelConfig; refuses what would change the maths."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise CheckpointError(f"model_type {family!r} is not one of {', '.join(FAMILIES)}")
    hf = with_defaults(hf, family)
    fields = decoder_fields(hf, family)
    if family in ("mistral", "mixtral"):
        fields["sliding_window"] = hf.get("sliding_window")
    elif family == "qwen2":
        fields.update(qwen_windows(hf, family), qkv_bias=True)
    if family == "mixtral":
        fields.update(mixtral_fields(hf))
    return build(**fields)


def convert_llama(hf_state: State, cfg: ModelConfig, family: str = "llama") -> State:
    """LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM / … (or their base models, without the `model.`
    prefix) tensors → ours. q_proj, k_proj, v_proj stay three tensors (cfg.qkv_layout "split": the file's own,
    no copy; "fused" stacks them into qkv); Qwen3's q_norm / k_norm
    (cfg.qk_norm) and Gemma 2's four norms per layer (cfg.norm "peri") are read too."""
    s = strip(hf_state, "model.", "embed_tokens.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    d_q, d_kv = cfg.d_attn, cfg.kv_heads * cfg.d_head
    norms = {"input_layernorm": "ln_attn", "post_attention_layernorm": "ln_mlp"}
    if cfg.norm == "peri":  # sandwich: a norm before and after each sub-layer
        norms = {"input_layernorm": "ln_attn", "post_attention_layernorm": "ln_attn_out",
                 "pre_feedforward_layernorm": "ln_mlp", "post_feedforward_layernorm": "ln_mlp_out"}
    m = Mapper(s, family)
    m.take("embed_tokens.weight", "embed.tok.weight", (V, D))
    for i in range(cfg.n_layers):
        h, b = f"layers.{i}.", f"blocks.{i}."
        for src, dst in norms.items():
            m.take(h + src + ".weight", b + dst + ".weight", (D,))
        a = h + "self_attn."
        shapes = {"q_proj": d_q, "k_proj": d_kv, "v_proj": d_kv}
        m.qkv([a + n for n in shapes], list(shapes.values()), b + "attn", D, cfg)  # split: used as stored
        if not cfg.attn_bias and any(a + n + ".bias" in m.rest for n in shapes):
            raise CheckpointError(f"{family}: the checkpoint has attention biases ({a}q_proj.bias …) but its "
                                  "config.json does not ask for them (attention_bias)")
        m.take(a + "o_proj.weight", b + "attn.out.weight", (D, d_q))
        if cfg.attn_out_bias:
            m.take(a + "o_proj.bias", b + "attn.out.bias", (D,))
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's q and k, before RoPE
            m.take(a + "q_norm.weight", b + "attn.q_norm.weight", (cfg.d_head,))
            m.take(a + "k_norm.weight", b + "attn.k_norm.weight", (cfg.d_head,))
        if cfg.mlp == "moe":  # Mixtral: a router and n_experts SwiGLU experts (model/families/mixtral_experts.py)
            take_experts(m, h, b, cfg)
        else:
            for src, dst, shape in (("gate_proj", "gate", (H, D)), ("up_proj", "up", (H, D)),
                                    ("down_proj", "down", (D, H))):
                m.take(h + f"mlp.{src}.weight", b + f"mlp.{dst}.weight", shape)
                if cfg.mlp_biases:
                    m.take(h + f"mlp.{src}.bias", b + f"mlp.{dst}.bias", shape[:1])
        m.ignore(a + "rotary_emb.inv_freq")  # old checkpoints saved the RoPE frequencies (recomputed here)
    m.take("norm.weight", "ln_f.weight", (D,))
    m.ignore("rotary_emb.inv_freq")
    lm_head(m, hf_state, cfg, family)
    return m.done()


FAMILY = Family("llama", "Llama, TinyLlama, SmolLM and other LlamaForCausalLM checkpoints", llama_config, convert_llama,
                fixed("LlamaForCausalLM"), {"bos": "<s>", "eos": "</s>"}, runs_in_transformers=bare_untied)
