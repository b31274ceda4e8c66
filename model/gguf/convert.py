"""A GGUF file's metadata and tensors → a Hugging Face config dict and state dict (llama, qwen2, qwen3, mistral).

The HF layout is what model/hf/load.py reads, so a GGUF model is built by the same converter as the
safetensors checkpoint it was made from. Architectures are llama.cpp's `general.architecture`: "llama"
(also Mistral and SmolLM files, which llama.cpp runs as Llama), "qwen2", "qwen3" (q/k RMSNorms, a head size of
its own: attention.key_length), "mistral". Anything the metadata
asks for that our model would compute differently (RoPE scaling, partial rotary, per-layer head counts) is
refused with one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
from attnlab.model.gguf.dequant import dequantize, unpermute
from attnlab.model.gguf.reader import GGUFError, GGUFFile

ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral"}  # → HF model_type
PERMUTED = ("llama", "mistral")  # llama.cpp reorders q/k rows for these (qwen2/qwen3 run NEOX RoPE unpermuted)
CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "mistral": "MistralForCausalLM"}
OWN_HEAD_DIM = ("qwen3",)  # head size from attention.key_length, not embedding_length / head_count
LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
LAYER_NAMES = {  # GGUF name inside blk.{i} → HF name inside model.layers.{i}
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",  # qwen3
}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
HF_LAYER = re.compile(r"(?<![\w.])(?:model\.)?layers\.(\d+)\.([\w.]+)\.(weight|bias)\b")
HF_TOP = re.compile(r"(?<![\w.])(?:model\.)?(embed_tokens|norm)\.weight\b|(?<![\w.])lm_head\.weight\b")


def model_type(g: GGUFFile) -> str:
    arch = g.architecture
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{g.path.name}: GGUF architecture {arch!r} is not supported "
                        f"(supported: {', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch]


def _int(g: GGUFFile, key: str, default: int | None = None) -> int:
    v = g.metadata.get(key, default)
    if v is None:
        raise GGUFError(f"{g.path.name}: metadata lacks {key}")
    if isinstance(v, np.ndarray) or isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise GGUFError(f"{g.path.name}: {key}={v!r} is not one positive integer (per-layer values are not supported)")
    return int(v)


def _float(g: GGUFFile, key: str, default: float) -> float:
    v = g.metadata.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        raise GGUFError(f"{g.path.name}: {key}={v!r} is not one positive number")
    return float(v)


def hf_config(g: GGUFFile) -> dict:
    """The config.json a transformers checkpoint of this model would have."""
    mt, arch = model_type(g), g.architecture
    p = f"{arch}."
    d, heads = _int(g, p + "embedding_length"), _int(g, p + "attention.head_count")
    kv = _int(g, p + "attention.head_count_kv", heads)
    own = mt in OWN_HEAD_DIM
    if (d % heads and not own) or heads % kv:
        raise GGUFError(f"{g.path.name}: {heads} heads do not split {d} features into {kv} k/v groups")
    head_dim = _int(g, p + "attention.key_length", d // heads or None) if own else d // heads
    for key in ("attention.key_length", "attention.value_length", "rope.dimension_count"):
        if _int(g, p + key, head_dim) != head_dim:
            raise GGUFError(f"{g.path.name}: {p}{key}={g.metadata[p + key]} ≠ {head_dim} (features per head) is "
                            "not supported")
    rope_scaling(g, p)
    tokens = g.metadata.get("tokenizer.ggml.tokens")
    emb = g.tensors.get("token_embd.weight")
    if emb is None:
        raise GGUFError(f"{g.path.name}: no token_embd.weight tensor")
    vocab = _int(g, p + "vocab_size", len(tokens) if isinstance(tokens, list) and tokens else emb.shape[0])
    n_layers = _int(g, p + "block_count")
    blocks = {int(m[1]) for m in map(LAYER.fullmatch, g.tensors) if m}
    if blocks != set(range(n_layers)):
        raise GGUFError(f"{g.path.name}: {p}block_count={n_layers} but its tensors are for "
                        f"{len(blocks)} blocks {_span(blocks)}")
    cfg = {
        "model_type": mt, "architectures": [CLASSES[mt]], "vocab_size": int(vocab), "hidden_size": d,
        "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": n_layers,
        "intermediate_size": _int(g, p + "feed_forward_length"),
        "max_position_embeddings": _int(g, p + "context_length"), "hidden_act": "silu",
        "rms_norm_eps": _float(g, p + "attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": _float(g, p + "rope.freq_base", 10000.0),
        "tie_word_embeddings": "output.weight" not in g.tensors, "torch_dtype": "float32",
    } | ({"head_dim": head_dim} if own else {})
    for ours, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if type(g.metadata.get(f"tokenizer.ggml.{key}")) is int:  # not a bool
            cfg[ours] = g.metadata[f"tokenizer.ggml.{key}"]
    if mt == "mistral":
        cfg["sliding_window"] = g.metadata.get(p + "attention.sliding_window")
    return cfg


def _span(blocks: set[int]) -> str:
    """'(0–3)', or the numbers themselves when they are not one run from 0."""
    if not blocks:
        return "(none)"
    if blocks == set(range(max(blocks) + 1)):
        return f"(0–{max(blocks)})"
    return f"({', '.join(map(str, sorted(blocks)[:6]))}{' …' if len(blocks) > 6 else ''})"


def rope_scaling(g: GGUFFile, p: str) -> None:
    """Refuse (one line) RoPE that llama.cpp would scale: a rope.scaling.type other than "none", llama3's
    rope_freqs tensor, or a scaling factor (rope.scaling.factor, the older rope.scale_linear) ≠ 1 without a type,
    which llama.cpp applies as linear scaling (its default type)."""
    scaling = g.metadata.get(p + "rope.scaling.type")
    if scaling not in ("none", None) or "rope_freqs.weight" in g.tensors:
        raise GGUFError(f"{g.path.name}: RoPE scaling ({scaling or 'rope_freqs.weight'}) is not supported; "
                        "only plain RoPE")
    for key in ("rope.scaling.factor", "rope.scale_linear"):
        factor = g.metadata.get(p + key)
        if scaling is not None or factor is None:
            continue
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise GGUFError(f"{g.path.name}: {p}{key}={factor!r} is not a number")
        if factor not in (0, 1):  # llama.cpp: 0 means no factor
            raise GGUFError(f"{g.path.name}: {p}{key}={factor:g} scales RoPE linearly (llama.cpp's default "
                            "rope.scaling.type), which is not supported; only plain RoPE")


def hf_name(g: GGUFFile, name: str, n_layers: int) -> str:
    """The transformers name of a GGUF tensor; an unknown tensor is refused (it would be silently dropped)."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    m = LAYER.fullmatch(name)
    if m and int(m[1]) < n_layers and m[2] in LAYER_NAMES:
        if m[3] == "bias" and m[2] not in ("attn_q", "attn_k", "attn_v"):
            raise GGUFError(f"{g.path.name}: tensor {name!r} (a bias there) is not supported")
        return f"model.layers.{m[1]}.{LAYER_NAMES[m[2]]}.{m[3]}"
    raise GGUFError(f"{g.path.name}: tensor {name!r} is not part of a {g.architecture} model we can load")


def gguf_names(message: str) -> str:
    """A message about the converted (HF-named) weights, told in the file's own tensor names and words."""
    layer = {v: k for k, v in LAYER_NAMES.items()}
    top = {"embed_tokens": "token_embd.weight", "norm": "output_norm.weight", None: "output.weight"}
    message = HF_LAYER.sub(lambda m: f"blk.{m[1]}.{layer[m[2]]}.{m[3]}" if m[2] in layer else m[0], message)
    message = HF_TOP.sub(lambda m: top[m[1]], message)
    return message.replace("the weights do not match the config", "its tensors do not match its metadata")


def hf_tensors(g: GGUFFile, cfg: dict) -> Iterator[tuple[str, np.ndarray]]:
    """(HF name, float32 array in HF layout) for every tensor; q and k rows back in rotate-half order."""
    names = {n: hf_name(g, n, cfg["num_hidden_layers"]) for n in g.tensors}
    permuted = g.architecture in PERMUTED
    for name, info in g.tensors.items():
        w = dequantize(g, info)  # GGUF [out, in] reversed = HF's [out, in]
        if permuted and ".attn_q." in name:
            w = unpermute(w, cfg["num_attention_heads"])
        elif permuted and ".attn_k." in name:
            w = unpermute(w, cfg["num_key_value_heads"])
        yield names[name], w
