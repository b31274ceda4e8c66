"""GPT-Neo (GPTNeoForCausalLM, GPTNeoModel; EleutherAI's GPT-Neo, the TinyStories models): GPT-2's pre-LN decoder
with learned positions, but q, k, v as separate Linears without biases, scores not scaled (q·kᵀ as it is), and
"local" layers (attention_layers) whose query sees itself and the window_size − 1 keys before it: ours the sliding
window on those layers (sliding_layers)."""

from __future__ import annotations

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, lm_head, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed


def attention_layers(hf: dict) -> list[str]:
    """Each layer's attention type, "global" or "local": attention_layers, else attention_types expanded
    ([[["global", "local"], 12]]: the pair 12 times), as GPTNeoConfig does."""
    layers = hf.get("attention_layers")
    if layers is None:
        layers = [t for kinds, repeat in hf.get("attention_types") or [] for _ in range(repeat) for t in kinds]
    if len(layers) != hf["num_layers"] or any(t not in ("global", "local") for t in layers):
        raise CheckpointError(f"gpt_neo: attention_layers={layers!r} must name global or local for each of the "
                              f"{hf['num_layers']} layers")
    return layers


def gpt_neo_config(hf: dict, names=None) -> ModelConfig:
    """A GPT-Neo config.json dict → ModelConfig."""
    hf = with_defaults(hf, "gpt_neo")
    require(hf, "gpt_neo", "vocab_size", "hidden_size", "num_heads", "num_layers", "max_position_embeddings")
    d = hf["hidden_size"]
    local = tuple(i for i, t in enumerate(attention_layers(hf)) if t == "local")
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["num_heads"], n_layers=hf["num_layers"],
        d_mlp=hf.get("intermediate_size") or 4 * d, max_len=hf["max_position_embeddings"], positional="learned",
        norm="pre", mlp=activation(hf["activation_function"], "gpt_neo"), bias=True, qkv_bias=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), output_head="lm",
        norm_eps=float(hf["layer_norm_epsilon"]), attn_scale=1.0,  # GPT-Neo does not scale its scores
        qkv_layout="split", sliding_window=hf["window_size"] if local else None, sliding_layers=local or None)


def convert_gpt_neo(hf_state: State, cfg: ModelConfig) -> State:
    """GPTNeoForCausalLM / GPTNeoModel tensors (with or without the `transformer.` prefix) → ours."""
    s = strip(hf_state, "transformer.", "wte.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    m = Mapper(s, "gpt_neo")
    m.take("wte.weight", "embed.tok.weight", (V, D))
    m.take("wpe.weight", "embed.pos.weight", (cfg.max_len, D))
    for i in range(cfg.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        a = h + "attn.attention."
        m.norm(h + "ln_1", b + "ln_attn", D)
        m.qkv([a + n for n in ("q_proj", "k_proj", "v_proj")], [D, D, D], b + "attn", D, cfg)
        m.linear(a + "out_proj", b + "attn.out", (D, D))
        m.norm(h + "ln_2", b + "ln_mlp", D)
        m.linear(h + "mlp.c_fc", b + "mlp.up", (H, D))
        m.linear(h + "mlp.c_proj", b + "mlp.down", (D, H))
        m.ignore(a + "bias", a + "masked_bias")  # older checkpoints' causal (and local-window) mask buffers
    m.norm("ln_f", "ln_f", D)
    lm_head(m, hf_state, cfg, "gpt_neo", "wte.weight")
    return m.done()


FAMILY = Family(
    "gpt_neo", "GPT-Neo and the TinyStories models (GPTNeoForCausalLM/GPTNeoModel checkpoints; local layers as a "
    "sliding window)", gpt_neo_config, convert_gpt_neo, fixed("GPTNeoForCausalLM"),
    {"bos": "<|endoftext|>", "eos": "<|endoftext|>"})
