"""Hugging Face BART and Marian (MarianMT) checkpoints → our ModelConfig (arch="encdec") and state dict. Pure
functions; no `transformers` import.

Both are post-LN encoder–decoders with biases everywhere, token embeddings × √d_model when scale_embedding
(`embed_scale`), and an LM head tied to the decoder's embeddings plus `final_logits_bias` (`lm_head_bias`).
- BART: learned positions whose row is position + 2 (`pos_offset`=2), a LayerNorm after the embeddings of each
  stack (`embed_norm`), GELU.
- Marian: fixed sinusoidal positions with every sine before every cosine (not interleaved), which checkpoints
  usually leave out; the table is computed here exactly as transformers computes it and loaded as our
  (learned-layout) position table. No embedding LayerNorm; SiLU ("swish").
"""

from __future__ import annotations

import math

import numpy as np
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, build, refuse, require, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed

FAMILIES = ("bart", "marian")
CLASSES = {"bart": "BartForConditionalGeneration", "marian": "MarianMTModel"}
SPECIALS = {"bart": {"bos": "<s>", "eos": "</s>", "pad": "<pad>", "mask": "<mask>"},
            "marian": {"eos": "</s>", "pad": "<pad>"}}
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu", "swish": "silu", "silu": "silu"}


def decoder_start(hf: dict) -> int:
    """The id every target starts with (BART: </s>; Marian: the pad token)."""
    start = hf.get("decoder_start_token_id")
    if start is None:
        raise CheckpointError(f"{hf.get('model_type')}: config.json lacks decoder_start_token_id")
    return int(start)


def bart_config(hf: dict) -> ModelConfig:
    """A BART or Marian config.json dict → ModelConfig; refuses what would change the maths."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise CheckpointError(f"model_type {family!r} is not one of {', '.join(FAMILIES)}")
    hf = with_defaults(hf, family)
    require(hf, family, "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings")
    refuse(hf, family, normalize_before=(False, False), add_final_layer_norm=(False, False),
            normalize_embedding=(True, True))
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"]:
        raise CheckpointError(f"{family}: encoder_attention_heads={hf['encoder_attention_heads']} ≠ "
                              f"decoder_attention_heads={hf['decoder_attention_heads']} is not supported (every "
                              "attention site of an encoder–decoder here has one head count)")
    if family == "marian" and hf.get("decoder_vocab_size", hf["vocab_size"]) != hf["vocab_size"]:
        raise CheckpointError("marian: a decoder_vocab_size other than vocab_size is not supported")
    act = hf.get("activation_function", "gelu")
    if act not in ACTS:
        raise CheckpointError(f"{family}: activation {act!r} is not supported (supported: {', '.join(ACTS)})")
    d = hf["d_model"]
    return build(
        arch="encdec", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["encoder_attention_heads"],
        n_layers=hf["encoder_layers"], n_dec_layers=hf["decoder_layers"], d_mlp=hf["encoder_ffn_dim"],
        dec_d_mlp=hf["decoder_ffn_dim"] if hf["decoder_ffn_dim"] != hf["encoder_ffn_dim"] else None,
        max_len=hf["max_position_embeddings"], positional="learned", pos_offset=2 if family == "bart" else 0,
        norm="post", mlp=ACTS[act], bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        output_head="lm", embed_norm=family == "bart", norm_eps=1e-5, lm_head_bias=True,
        embed_scale=math.sqrt(d) if hf.get("scale_embedding") else 1.0, qkv_layout="split",
    )


def marian_positions(n_pos: int, dim: int) -> torch.Tensor:
    """Marian's fixed table [n_pos, dim]: sin(p/10000^(2i/d)) in the first half, cos in the second (float64
    numpy, then float32, as transformers builds it)."""
    enc = np.array([[p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for p in range(n_pos)])
    half = (dim + 1) // 2
    out = torch.empty(n_pos, dim)
    out[:, :half] = torch.FloatTensor(np.sin(enc[:, 0::2]))
    out[:, half:] = torch.FloatTensor(np.cos(enc[:, 1::2]))
    return out


def convert_bart(hf_state: State, cfg: ModelConfig, family: str = "bart") -> State:
    """BartForConditionalGeneration / MarianMTModel (or their base models, without `model.`) tensors → ours."""
    s = strip(hf_state, "model.", "encoder.layers.0.fc1.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    m = Mapper(s, family)
    shared = m.rest.pop("shared.weight", None)
    n_pos = cfg.max_len + cfg.pos_offset
    for stack in ("encoder", "decoder"):
        emb = m.rest.pop(f"{stack}.embed_tokens.weight", None)
        if emb is None and shared is None:
            raise CheckpointError(f"{family}: the checkpoint lacks {stack}.embed_tokens.weight and shared.weight")
        tok = emb if emb is not None else shared
        if tuple(tok.shape) != (V, D):
            raise CheckpointError(f"{family}: {stack}'s token embeddings have shape {tuple(tok.shape)}, need {(V, D)}")
        m.out[f"{stack}.embed.tok.weight"] = tok
        pos = f"{stack}.embed_positions.weight"
        if family == "marian":
            table = marian_positions(n_pos, D)
            saved = m.rest.pop(pos, None)
            if saved is not None and not torch.allclose(saved.float(), table, atol=1e-6):
                raise CheckpointError(f"marian: {pos} is not Marian's sinusoidal table")
            m.out[f"{stack}.embed.pos.weight"] = table
        else:
            m.take(pos, f"{stack}.embed.pos.weight", (n_pos, D))
            m.norm(f"{stack}.layernorm_embedding", f"{stack}.embed.norm", D)
        n = cfg.n_layers if stack == "encoder" else cfg.dec_layers
        for i in range(n):
            h, b = f"{stack}.layers.{i}.", f"{stack}.blocks.{i}."
            a = h + "self_attn."
            m.qkv([a + f"{x}_proj" for x in "qkv"], [D, D, D], b + "attn", D, cfg, bias=True)  # split: as stored
            m.linear(a + "out_proj", b + "attn.out", (D, D))
            m.norm(h + "self_attn_layer_norm", b + "ln_attn_out", D)
            if stack == "decoder":
                c = h + "encoder_attn."
                m.linear(c + "q_proj", b + "cross_attn.q", (D, D))
                m.qkv([c + "k_proj", c + "v_proj"], [D, D], b + "cross_attn", D, cfg, parts="kv", bias=True)
                m.linear(c + "out_proj", b + "cross_attn.out", (D, D))
                m.norm(h + "encoder_attn_layer_norm", b + "ln_cross_out", D)
            width = (cfg.dec_d_mlp or H) if stack == "decoder" else H  # decoder_ffn_dim may differ
            m.linear(h + "fc1", b + "mlp.up", (width, D))
            m.linear(h + "fc2", b + "mlp.down", (D, width))
            m.norm(h + "final_layer_norm", b + "ln_mlp_out", D)
    bias = hf_state.get("final_logits_bias")
    m.out["decoder.lm_head.bias"] = torch.zeros(V) if bias is None else bias.reshape(-1)
    if m.out["decoder.lm_head.bias"].shape != (V,):
        raise CheckpointError(f"{family}: final_logits_bias has shape {tuple(bias.shape)}, need (1, {V})")
    head = hf_state.get("lm_head.weight")
    if cfg.tie_embeddings:
        if head is not None and not torch.equal(head, m.out["decoder.embed.tok.weight"]):
            raise CheckpointError(f"{family}: lm_head.weight differs from the decoder's embeddings but "
                                  "tie_word_embeddings is true")
    elif head is None:
        raise CheckpointError(f"{family}: tie_word_embeddings is false but the checkpoint has no lm_head.weight")
    else:
        m.out["decoder.lm_head.weight"] = head
    m.ignore_outside("lm_head.weight", "final_logits_bias")
    return m.done()


FAMILY = Family("bart", "BART, DistilBART and other BartForConditionalGeneration checkpoints",
                lambda hf, names=None: bart_config(hf), lambda state, cfg: convert_bart(state, cfg, "bart"),
                fixed("BartForConditionalGeneration"), SPECIALS["bart"])
