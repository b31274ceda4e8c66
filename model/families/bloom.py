"""BLOOM (BloomForCausalLM, BloomModel; BigScience's BLOOM and BLOOMZ): ALiBi instead of positions, a LayerNorm
right after the token embeddings, q, k and v fused per head (query_key_value's rows [head][q | k | v][d_head], ours
[q | k | v][head][d_head]), pre-LN blocks with biases, the tanh GELU, a tied LM head. Transformers adds m_h·j (the
key's position) to each score, we add the paper's −m_h·(i − j): they differ by a constant per query row, so the
softmax, the patterns and everything after are the same; the captured scores are ours."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, build, lm_head, refuse, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed

TRAINED_LEN = 2048  # every BLOOM checkpoint's training length (config.json has no position limit: ALiBi has none)


def bloom_config(hf: dict, names=None) -> ModelConfig:
    """A BLOOM config.json dict → ModelConfig."""
    hf = with_defaults(hf, "bloom")
    d = hf.get("n_embed") or hf.get("hidden_size")  # n_embed: older files' name for hidden_size
    require({**hf, "hidden_size": d}, "bloom", "vocab_size", "hidden_size", "n_head", "n_layer")
    refuse(hf, "bloom", apply_residual_connection_post_layernorm=(False, False))
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["n_head"], n_layers=hf["n_layer"],
        d_mlp=4 * d, max_len=int(hf.get("seq_length") or TRAINED_LEN), positional="alibi", norm="pre",
        mlp="gelu_tanh", bias=True, embed_norm=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        output_head="lm", norm_eps=float(hf["layer_norm_epsilon"]))


def convert_bloom(hf_state: State, cfg: ModelConfig) -> State:
    """BloomForCausalLM / BloomModel tensors (with or without the `transformer.` prefix) → ours."""
    s = strip(hf_state, "transformer.", "word_embeddings.weight")
    D, H, V, n, d = cfg.d_model, cfg.hidden, cfg.vocab_size, cfg.n_heads, cfg.d_head
    m = Mapper(s, "bloom")
    m.take("word_embeddings.weight", "embed.tok.weight", (V, D))
    m.norm("word_embeddings_layernorm", "embed.norm", D)
    for i in range(cfg.n_layers):
        h, b, a = f"h.{i}.", f"blocks.{i}.", f"h.{i}.self_attention."
        m.norm(h + "input_layernorm", b + "ln_attn", D)
        w = m.pop(a + "query_key_value.weight", (3 * D, D))
        m.out[b + "attn.qkv.weight"] = w.view(n, 3, d, D).transpose(0, 1).reshape(3 * D, D)  # [H,3,d,D] -> [3,H,d,D]
        qkv_b = m.pop(a + "query_key_value.bias", (3 * D,))
        m.out[b + "attn.qkv.bias"] = qkv_b.view(n, 3, d).transpose(0, 1).reshape(3 * D)  # [H,3,d] -> [3,H,d]
        m.linear(a + "dense", b + "attn.out", (D, D))
        m.norm(h + "post_attention_layernorm", b + "ln_mlp", D)
        m.linear(h + "mlp.dense_h_to_4h", b + "mlp.up", (H, D))
        m.linear(h + "mlp.dense_4h_to_h", b + "mlp.down", (D, H))
    m.norm("ln_f", "ln_f", D)
    lm_head(m, hf_state, cfg, "bloom", "word_embeddings.weight")
    return m.done()


FAMILY = Family(
    "bloom", "BLOOM and BLOOMZ (BloomForCausalLM/BloomModel checkpoints; ALiBi)", bloom_config, convert_bloom,
    fixed("BloomForCausalLM"), {"bos": "<s>", "eos": "</s>", "pad": "<pad>"})
