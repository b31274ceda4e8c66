"""Tiny GGUF files written with gguf.GGUFWriter from tiny random transformers models — no downloads.

`write_gguf` quantises each tensor to the type asked for, applies llama.cpp's q/k row permutation (llama),
and returns the reference: the transformers model holding exactly the dequantised weights. K-quant types
(no quantiser in gguf.quants) are written as random blocks with sane scales, dequantised for the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from attnlab.model.gguf.dequant import permute
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGUFValueType
from gguf.constants import GGMLQuantizationType as Q

from tests import hf_fixtures as F

GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
CLASSES = F.LLAMA_CLASSES | {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}
K_QUANTS = (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS)  # no quantiser in gguf.quants: random blocks
VALUE_TYPES = {bool: GGUFValueType.BOOL, int: GGUFValueType.UINT32, float: GGUFValueType.FLOAT32,
               str: GGUFValueType.STRING}


def gguf_name(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, i, *rest = hf.split(".")  # model.layers.{i}.{module}.{weight|bias}
    return f"blk.{i}.{GGUF_NAMES['.'.join(rest[:-1])]}.{rest[-1]}"


def random_k_blocks(shape: tuple[int, ...], qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random K-quant (and IQ4) bytes uint8 [rows, row bytes] whose f16 scales are small and finite."""
    block, size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    low, high = (5e-5, 3e-4) if qtype == Q.IQ4_XS else (0.002, 0.01)  # IQ4_XS: d × 6-bit scale × level ≤ 127
    scales = rng.uniform(low, high, (rows, cols // block, 2)).astype(np.float16).view(np.uint8)  # [.., 2, 2 bytes]
    if qtype in (Q.Q3_K, Q.Q6_K):  # d at the block's end
        raw[..., -2:] = scales[..., :2]
    elif qtype == Q.Q2_K:  # d, dmin at the block's end
        raw[..., -4:] = scales
    else:  # d (, dmin) at the start
        raw[..., :4] = scales
    return raw.reshape(rows, -1)  # [rows, row bytes]


def encode(w: np.ndarray, qtype: Q, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(what the file stores, the float32 it dequantises to) for one tensor."""
    if qtype == Q.F32:
        return w.astype(np.float32), w.astype(np.float32)
    if qtype in K_QUANTS:
        raw = random_k_blocks(w.shape, qtype, rng)
    else:
        raw = quants.quantize(w.astype(np.float32), qtype)
    return raw, quants.dequantize(raw, qtype).astype(np.float32).reshape(w.shape)


def byte_level_tokens(tok, with_eot: bool = True) -> tuple[list[str], list[str]]:
    """(tokens in id order, merges) of a byte-level BPE tokenizer; without `<|endoftext|>` when not with_eot."""
    data = json.loads(tok.to_str())
    tokens = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return ([t for t in tokens if with_eot or t != F.EOT]), merges


def sentencepiece_tokens() -> list[str]:
    """A llama sentencepiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then pieces ("▁" words and their
    prefixes, letters) best-first; transformers derives the merges from the order."""
    pieces = ["▁"] + sorted({c for line in F.CORPUS for c in line if c != " "})
    for word in F.WORDS:
        pieces += [p for p in ("▁" + word[:i] for i in range(1, len(word) + 1)) if p not in pieces]
    return ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces


def tokenizer_metadata(writer: GGUFWriter, tok, kind: str = "gpt2", extra: dict | None = None) -> int:
    """llama.cpp's tokenizer metadata: kind "gpt2" (the byte-level BPE `tok`), "gpt2-no-eot" (the same without
    `<|endoftext|>`, no special ids) or "llama" (sentencepiece_tokens, <s>/</s> as BOS/EOS); `extra` adds
    tokenizer.ggml.* keys (add_bos_token, add_eos_token). Returns the vocabulary size."""
    if kind == "llama":
        tokens = sentencepiece_tokens()
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([-float(i) for i in range(len(tokens))])
        writer.add_token_types([2 if i == 0 else 3 if i < 3 else 6 if i < 259 else 1 for i in range(len(tokens))])
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    else:
        tokens, merges = byte_level_tokens(tok, with_eot=kind == "gpt2")
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types([3 if t == F.EOT else 1 for t in tokens])  # 3: control, 1: normal
        writer.add_token_merges(merges)
        if kind == "gpt2":
            writer.add_bos_token_id(tokens.index(F.EOT))
            writer.add_eos_token_id(tokens.index(F.EOT))
    for key, value in (extra or {}).items():
        writer.add_bool(f"tokenizer.ggml.{key}", value)
    return len(tokens)


def write_gguf(path: Path, family: str, types: dict[str, Q], seed: int = 0, tokenizer: str = "gpt2",
               tokenizer_extra: dict | None = None, n_embeddings: int | None = None, metadata: dict | None = None,
               skip: tuple[str, ...] = (), **cfg):
    """A random `family` (llama, qwen2, qwen3) model written as GGUF with tensor types by role ("embed", "attn",
    "mlp", "norm", "head") and a `tokenizer` as tokenizer_metadata writes it. Returns (path, the transformers
    model holding the dequantised weights, the byte-level tokenizer). `n_embeddings`: the model's vocabulary when
    not the tokenizer's (written as {family}.vocab_size). `metadata`: keys set to other values (None: removed)
    after the writer's own; `skip`: GGUF tensor names ending so are not written."""
    import transformers

    F.quiet_transformers()
    tok = F.bpe_tokenizer()
    w = GGUFWriter(str(path), family)
    n_vocab = tokenizer_metadata(w, tok, tokenizer, tokenizer_extra)
    conf_cls, model_cls = (getattr(transformers, n) for n in CLASSES[family])
    conf = conf_cls(vocab_size=n_embeddings or n_vocab, attn_implementation="eager", **cfg)
    if n_embeddings:
        w.add_vocab_size(n_embeddings)
    torch.manual_seed(seed)
    model = model_cls(conf).eval()
    F._perturb(model, seed)
    rng = np.random.default_rng(seed)
    H, KV = conf.num_attention_heads, conf.num_key_value_heads
    w.add_block_count(conf.num_hidden_layers)
    w.add_context_length(conf.max_position_embeddings)
    w.add_embedding_length(conf.hidden_size)
    w.add_feed_forward_length(conf.intermediate_size)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(float(conf.rope_parameters["rope_theta"]) if getattr(conf, "rope_parameters", None)
                         else float(conf.rope_theta))
    w.add_layer_norm_rms_eps(conf.rms_norm_eps)
    head_dim = getattr(conf, "head_dim", None) or conf.hidden_size // H
    w.add_rope_dimension_count(head_dim)
    if family == "qwen3":  # llama.cpp writes Qwen3's own head size
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    ref = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and conf.tie_word_embeddings:
            continue
        a = t.numpy()
        role = ("embed" if "embed" in name else "head" if "lm_head" in name else "norm" if a.ndim == 1
                else "attn" if "self_attn" in name else "mlp")
        qtype = types.get(role, Q.F32) if a.ndim == 2 else Q.F32  # llama.cpp keeps 1-d tensors float32
        stored, deq = encode(a, qtype, rng)
        ref[name] = torch.from_numpy(deq.copy())
        if family == "llama" and ("q_proj" in name or "k_proj" in name):  # what llama.cpp's converter does
            stored = permute(stored, H if "q_proj" in name else KV)
        if not gguf_name(name).endswith(skip or ("\0",)):
            w.add_tensor(gguf_name(name), stored, raw_dtype=None if qtype == Q.F32 else qtype)
    for key, value in (metadata or {}).items():
        w.kv_data[0].pop(key, None)
        if value is not None:
            w.add_key_value(key, value, VALUE_TYPES[type(value)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if conf.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    model.load_state_dict(ref)
    return path, model, tok
