"""Hugging Face RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA and ALBERT checkpoints → our ModelConfig and state dict.
Pure functions; no `transformers` import.

All five are BERT's post-LN encoder with a different layout:
- RoBERTa / XLM-R: position p reads row padding_idx + 1 + p (`pos_offset`); the MLM head is `lm_head.*`.
- DistilBERT: no token types, `q_lin`/`k_lin`/… names, every LayerNorm at eps 1e-12; sinusoidal positions
  (`sinusoidal_pos_embds`) are stored in the checkpoint as a table, so they load as learned ones.
- ELECTRA: embeddings of width embedding_size projected to hidden_size (`d_embed`); ElectraForMaskedLM's
  generator head is our MLM head; ElectraForPreTraining's discriminator head (one real/replaced score per
  token) is knowingly left out, like BERT's pooler.
- ALBERT: factorised embeddings and ONE layer shared by all num_hidden_layers: its tensors fill every block (the
  same tensors, no copy), so each layer keeps its own hook points and records.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.bert import map_post_ln_layer
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

FAMILIES = ("roberta", "xlm-roberta", "distilbert", "electra", "albert")
# family → (base class, MLM class) in transformers, for parity
CLASSES = {"roberta": ("RobertaModel", "RobertaForMaskedLM"),
           "xlm-roberta": ("XLMRobertaModel", "XLMRobertaForMaskedLM"),
           "distilbert": ("DistilBertModel", "DistilBertForMaskedLM"),
           "electra": ("ElectraModel", "ElectraForMaskedLM"),
           "albert": ("AlbertModel", "AlbertForMaskedLM")}
SPECIALS = {"roberta": {"bos": "<s>", "eos": "</s>", "pad": "<pad>", "mask": "<mask>"},
            "xlm-roberta": {"bos": "<s>", "eos": "</s>", "pad": "<pad>", "mask": "<mask>"},
            "distilbert": {"pad": "[PAD]", "mask": "[MASK]"},
            "electra": {"pad": "[PAD]", "mask": "[MASK]"},
            "albert": {"pad": "<pad>", "mask": "[MASK]"}}
# the first key of each family's MLM head (the loader builds the head only when the weights have it)
MLM_PROBES = {"roberta": "lm_head.dense.weight", "xlm-roberta": "lm_head.dense.weight",
              "distilbert": "vocab_transform.weight", "electra": "generator_predictions.dense.weight",
              "albert": "predictions.dense.weight"}
PREFIXES = {"roberta": "roberta.", "xlm-roberta": "roberta.", "distilbert": "distilbert.", "electra": "electra.",
            "albert": "albert."}


def has_mlm_head(family: str, hf_state) -> bool:
    return MLM_PROBES[family] in hf_state


def encoder_config(hf: dict, family: str, mlm: bool) -> ModelConfig:
    """One of the five families' config.json dict → ModelConfig (post-LN encoder)."""
    if family not in FAMILIES:
        raise CheckpointError(f"model_type {family!r} is not one of {', '.join(FAMILIES)}")
    if family == "distilbert":
        require(hf, family, "vocab_size", "dim", "n_heads", "n_layers", "hidden_dim", "max_position_embeddings")
        return build(
            arch="encoder", vocab_size=hf["vocab_size"], d_model=hf["dim"], n_heads=hf["n_heads"],
            n_layers=hf["n_layers"], d_mlp=hf["hidden_dim"], max_len=hf["max_position_embeddings"],
            positional="learned", norm="post", mlp=activation(hf.get("activation", "gelu"), family),  # head: the same
            output_head="mlm" if mlm else "none", embed_norm=True, norm_eps=1e-12, qkv_layout="split")
    require(hf, family, "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
             "intermediate_size", "max_position_embeddings")
    refuse(hf, family, position_embedding_type=("absolute", "absolute"), is_decoder=(False, False),
            add_cross_attention=(False, False))
    offset, d_embed = 0, None
    if family in ("roberta", "xlm-roberta"):
        require(hf, family, "pad_token_id")
        offset = int(hf["pad_token_id"]) + 1  # positions count from padding_idx + 1
    if family in ("electra", "albert"):
        d_embed = int(hf.get("embedding_size", 128))
        if family == "electra" and d_embed == hf["hidden_size"]:
            d_embed = None  # ELECTRA projects only when the widths differ
    if family == "albert":
        refuse(hf, family, num_hidden_groups=(1, 1), inner_group_num=(1, 1))
    act = hf.get("hidden_act", "gelu_new" if family == "albert" else "gelu")
    # RoBERTa's and ELECTRA's MLM heads apply exact GELU whatever hidden_act says; ours follows hidden_act
    exact_head = mlm and family in ("roberta", "xlm-roberta", "electra")
    return build(
        arch="encoder", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_mlp=hf["intermediate_size"],
        max_len=hf["max_position_embeddings"] - offset, pos_offset=offset, d_embed=d_embed, positional="learned",
        pad_position_id=offset - 1 if offset else None,
        norm="post", mlp=_mlm_act(act, family, exact_head), output_head="mlm" if mlm else "none",
        type_vocab_size=int(hf.get("type_vocab_size", 2)), embed_norm=True,
        norm_eps=float(hf.get("layer_norm_eps", 1e-12)), qkv_layout="split")


def _mlm_act(name: str, family: str, exact_head: bool) -> str:
    act = activation(name, family)
    if exact_head and act != "gelu":
        raise CheckpointError(f"{family}: hidden_act {name!r} with an MLM head is not supported "
                              "(the head's GELU would differ from the layers' activation)")
    return act


def convert_encoder(hf_state: State, cfg: ModelConfig, family: str) -> State:
    """The family's base or masked-LM model tensors (with or without its prefix) → ours."""
    probe = "embeddings.word_embeddings.weight"
    s = strip(rename_gamma_beta(hf_state), PREFIXES[family], probe)
    m = Mapper(s, family)
    _embeddings(m, cfg, family)
    for i in range(cfg.n_layers):
        if family == "albert":
            _albert_layer(m, i, cfg)
        else:
            map_post_ln_layer(m, i, cfg, "distilbert" if family == "distilbert" else "bert")
    if family == "albert":
        m.ignore_prefix("encoder.albert_layer_groups.0.")  # taken by every block above
    m.ignore_prefix("pooler.", "discriminator_predictions.", "sop_classifier.", *TASK_HEAD_WEIGHTS)
    _mlm_head(m, cfg, family)
    return m.done()


def _embeddings(m: Mapper, cfg: ModelConfig, family: str) -> None:
    E = cfg.d_embed or cfg.d_model
    e = "embeddings."
    m.take(e + "word_embeddings.weight", "embed.tok.weight", (cfg.vocab_size, E))
    m.take(e + "position_embeddings.weight", "embed.pos.weight", (cfg.max_len + cfg.pos_offset, E))
    if cfg.type_vocab_size:
        m.take(e + "token_type_embeddings.weight", "embed.types.weight", (cfg.type_vocab_size, E))
    m.norm(e + "LayerNorm", "embed.norm", E)
    m.ignore(e + "position_ids", e + "token_type_ids")  # index buffers
    if cfg.d_embed:
        proj = "embeddings_project" if family == "electra" else "encoder.embedding_hidden_mapping_in"
        m.linear(proj, "embed.project", (cfg.d_model, E))


def _albert_layer(m: Mapper, i: int, cfg: ModelConfig) -> None:
    """The shared layer's tensors (not moved: every block takes the same ones) into block i."""
    D, H = cfg.d_model, cfg.hidden
    h, b = "encoder.albert_layer_groups.0.albert_layers.0.", f"blocks.{i}."

    def get(key: str, shape: tuple[int, ...]) -> torch.Tensor:
        if h + key not in m.rest:
            raise CheckpointError(f"albert: the checkpoint lacks {h + key}")
        t = m.rest[h + key]
        if tuple(t.shape) != shape:
            raise CheckpointError(f"albert: {h + key} has shape {tuple(t.shape)}, config.json needs {shape}")
        return t

    def linear(src: str, dst: str, shape: tuple[int, int]) -> None:
        m.out[b + dst + ".weight"], m.out[b + dst + ".bias"] = get(src + ".weight", shape), get(src + ".bias", shape[:1])

    for n, part in zip(("query", "key", "value"), "qkv"):  # split: the shared tensors as stored
        linear(f"attention.{n}", f"attn.{part}", (D, D))
    linear("attention.dense", "attn.out", (D, D))
    linear("attention.LayerNorm", "ln_attn_out", (D,))
    linear("ffn", "mlp.up", (H, D))
    linear("ffn_output", "mlp.down", (D, H))
    linear("full_layer_layer_norm", "ln_mlp_out", (D,))


# family → (dense, LayerNorm, decoder weight, decoder bias, head bias or None); keys outside the base prefix
_HEADS = {"roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder.weight", "lm_head.decoder.bias",
                      "lm_head.bias"),
          "distilbert": ("vocab_transform", "vocab_layer_norm", "vocab_projector.weight", "vocab_projector.bias", None),
          "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.weight",
                      "generator_lm_head.bias", None),
          "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.decoder.weight",
                     "predictions.decoder.bias", "predictions.bias")}
_HEADS["xlm-roberta"] = _HEADS["roberta"]


def _mlm_head(m: Mapper, cfg: ModelConfig, family: str) -> None:
    """The masked-LM head (its decoder tied to the word embeddings, as every one of these families ties it)."""
    dense, norm, dec_w, dec_b, bias = _HEADS[family]
    present = any(k.startswith((dense, norm, dec_w.rsplit(".", 1)[0])) for k in m.rest)
    if cfg.output_head_kind != "mlm":
        if present:
            raise CheckpointError(f"{family}: the checkpoint has an MLM head but the config asks for none")
        return
    E = cfg.d_embed or cfg.d_model
    m.linear(dense, "mlm.dense", (E, cfg.d_model))
    m.norm(norm, "mlm.norm", E)
    m.take(bias or dec_b, "mlm.decoder.bias", (cfg.vocab_size,))
    for key, ours in ((dec_b, "mlm.decoder.bias"), (dec_w, "embed.tok.weight")):
        t = m.rest.pop(key, None)
        if t is not None and not torch.equal(t, m.out[ours]):
            raise CheckpointError(f"{family}: {key} differs from {ours} (an untied MLM decoder is not supported)")


def row(family: str, summary: str) -> Family:
    """The family table's row for one of the five: the MLM head when the tensor names hold one (names unknown:
    when `architectures` names a ...ForMaskedLM class)."""

    def config(hf: dict, names: Collection[str] | None = None) -> ModelConfig:
        if names is not None:
            mlm = has_mlm_head(family, names)
        else:
            mlm = any(a.endswith("ForMaskedLM") for a in hf.get("architectures") or [])
        return encoder_config(hf, family, mlm)

    base, mlm_class = CLASSES[family]
    return Family(family, summary, config, lambda state, cfg: convert_encoder(state, cfg, family),
                  lambda cfg: mlm_class if cfg.output_head_kind == "mlm" else base, SPECIALS[family],
                  encoder_of_task_models=True)
