"""BERT (BertModel, BertForMaskedLM, BertForPreTraining): post-LN encoder, token types, embedding LayerNorm."""

from __future__ import annotations

from collections.abc import Collection

import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import (
    Mapper,
    State,
    activation,
    build,
    refuse,
    rename_gamma_beta,
    require,
    strip,
)
from attnlab.model.families.family import TASK_HEAD_WEIGHTS, Family


def bert_config(hf: dict, names: Collection[str] | None = None) -> ModelConfig:
    """A BERT config.json dict → ModelConfig (post-LN encoder, token types, embedding LayerNorm).

    BERT's masked-LM head is built when the tensor `names` hold one; without names (None), when
    `architectures` names BertForMaskedLM or BertForPreTraining.
    """
    require(hf, "bert", "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
             "intermediate_size", "max_position_embeddings")
    refuse(hf, "bert", position_embedding_type=("absolute", "absolute"), is_decoder=(False, False),
            add_cross_attention=(False, False))
    if names is not None:
        mlm = has_mlm_head(names)
    else:
        mlm = any(a in ("BertForMaskedLM", "BertForPreTraining") for a in hf.get("architectures") or [])
    return build(
        arch="encoder", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
        positional="learned", norm="post", mlp=activation(hf.get("hidden_act", "gelu"), "bert"), bias=True,
        tie_embeddings=True, output_head="mlm" if mlm else "none", type_vocab_size=int(hf.get("type_vocab_size", 2)),
        embed_norm=True, norm_eps=float(hf.get("layer_norm_eps", 1e-12)), qkv_layout="split",
    )


# transformers' names in one post-LN encoder layer: its prefix; q, k, v; the attention's output and LayerNorm; the
# MLP's up, down and LayerNorm
LAYER_NAMES = {
    "bert": ("encoder.layer.{i}.", ("attention.self.query", "attention.self.key", "attention.self.value"),
             "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
             "output.LayerNorm"),
    "distilbert": ("transformer.layer.{i}.", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                   "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"),
}


def map_post_ln_layer(m: Mapper, i: int, cfg: ModelConfig, layout: str = "bert") -> None:
    """Encoder layer i in `layout`'s names (LAYER_NAMES) → our block i; q, k, v as stored."""
    prefix, qkv, out, ln_attn, up, down, ln_mlp = LAYER_NAMES[layout]
    D, H = cfg.d_model, cfg.hidden
    h, b = prefix.format(i=i), f"blocks.{i}."
    m.qkv([h + n for n in qkv], [D, D, D], b + "attn", D, cfg, bias=True)
    m.linear(h + out, b + "attn.out", (D, D))
    m.norm(h + ln_attn, b + "ln_attn_out", D)
    m.linear(h + up, b + "mlp.up", (H, D))
    m.linear(h + down, b + "mlp.down", (D, H))
    m.norm(h + ln_mlp, b + "ln_mlp_out", D)


def has_mlm_head(names: Collection[str]) -> bool:
    """True when the tensor names hold BERT's masked-LM head."""
    return any(k.startswith("cls.predictions.transform.") for k in names)


def convert_bert(hf_state: State, cfg: ModelConfig) -> State:
    """BertModel (unprefixed) or BertForMaskedLM / BertForPreTraining (`bert.` prefix) tensors → ours.

    Pooler and next-sentence head are ignored; the MLM head is converted when cfg.output_head_kind == "mlm".
    """
    s = strip(rename_gamma_beta(hf_state), "bert.", "embeddings.word_embeddings.weight")
    D, V = cfg.d_model, cfg.vocab_size
    m = Mapper(s, "bert")
    e = "embeddings."
    m.take(e + "word_embeddings.weight", "embed.tok.weight", (V, D))
    m.take(e + "position_embeddings.weight", "embed.pos.weight", (cfg.max_len, D))
    m.take(e + "token_type_embeddings.weight", "embed.types.weight", (cfg.type_vocab_size, D))
    m.norm(e + "LayerNorm", "embed.norm", D)
    m.ignore(e + "position_ids", e + "token_type_ids")  # index buffers
    for i in range(cfg.n_layers):
        map_post_ln_layer(m, i, cfg)
    m.ignore_prefix("pooler.", "cls.seq_relationship.", *TASK_HEAD_WEIGHTS)  # sentence/task heads: not our model
    p = "cls.predictions."
    if cfg.output_head_kind == "mlm":
        m.linear(p + "transform.dense", "mlm.dense", (D, D))
        m.norm(p + "transform.LayerNorm", "mlm.norm", D)
        m.take(p + "bias", "mlm.decoder.bias", (V,))
        dec_b = hf_state.get(p + "decoder.bias")
        if dec_b is not None and not torch.equal(dec_b, m.out["mlm.decoder.bias"]):
            raise CheckpointError("bert: cls.predictions.decoder.bias differs from cls.predictions.bias")
        dec_w = hf_state.get(p + "decoder.weight")
        if dec_w is not None and not torch.equal(dec_w, m.out["embed.tok.weight"]):
            raise CheckpointError("bert: an MLM decoder not tied to the word embeddings is not supported")
        m.ignore(p + "decoder.bias", p + "decoder.weight")
    elif any(k.startswith(p) for k in m.rest):
        raise CheckpointError("bert: the checkpoint has an MLM head but the config asks for none")
    return m.done()


FAMILY = Family(
    "bert", "BERT, MiniLM and other BertModel/BertForMaskedLM checkpoints", bert_config, convert_bert,
    lambda cfg: "BertForMaskedLM" if cfg.output_head_kind == "mlm" else "BertModel", {"pad": "[PAD]", "mask": "[MASK]"},
    encoder_of_task_models=True)
