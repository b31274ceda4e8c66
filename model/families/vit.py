"""Hugging Face ViT checkpoints (ViTModel, ViTForImageClassification) → our ModelConfig (arch="vit") and state dict,
and the folder's preprocessing (preprocessor_config.json) as an ImagePrep. Pure functions; no `transformers` import.

ViTModel's pooler (dense + tanh on [CLS], used by no head here) is knowingly ignored; positions are not
interpolated (the model reads images at its config's image_size only)."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, require, strip
from attnlab.model.families.family import Family
from attnlab.model.images import ImagePrep, hf_prep


def _side(v, name: str, family: str = "vit") -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 2 or v[0] != v[1]:
            raise CheckpointError(f"{family}: {name}={v} is not square; only square images and patches are supported")
        v = v[0]
    return int(v)


def require_rgb(cfg: ModelConfig, family: str) -> None:
    """A folder's images are read as RGB (model/images.py, as transformers' image processors give them): a model
    of another channel count (converted, at parity on its own pixels) is refused before any image reaches it."""
    if cfg.n_channels != 3:
        raise CheckpointError(f"{family}: num_channels={cfg.n_channels} is not supported (images are read as RGB, "
                              "3 channels, as its image processor gives them)")


def has_classifier(names) -> bool:
    """True for ViTForImageClassification weights (a linear classifier on [CLS])."""
    return "classifier.weight" in names


def vit_config(hf: dict, names=None) -> ModelConfig:
    """A ViT config.json dict → ModelConfig (pre-LN, learned 1-D positions over [CLS] + patches); a classifier
    when the tensor `names` hold one (None: unknown, no classifier)."""
    classes = names is not None and has_classifier(names)
    require(hf, "vit", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
             "image_size", "patch_size")
    n_classes = (len(hf.get("id2label") or {}) or int(hf.get("num_labels", 2))) if classes else 0
    return build(
        arch="vit", d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"], n_layers=hf["num_hidden_layers"],
        d_mlp=hf["intermediate_size"], image_size=_side(hf["image_size"], "image_size"),
        patch_size=_side(hf["patch_size"], "patch_size"), n_channels=int(hf.get("num_channels", 3)),
        n_classes=n_classes, positional="learned", norm="pre", mlp=activation(hf.get("hidden_act", "gelu"), "vit"),
        bias=True, qkv_bias=bool(hf.get("qkv_bias", True)), norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
        qkv_layout="split",
    )


def class_names(hf: dict, n: int) -> tuple[str, ...]:
    """Class names from id2label (keys may be strings), else class_0 …"""
    labels = {int(k): str(v) for k, v in (hf.get("id2label") or {}).items()}
    return tuple(labels.get(i, f"class_{i}") for i in range(n))


def map_vit_encoder(m, cfg: ModelConfig) -> None:
    """The encoder layers, the final LayerNorm and the pooler (left out) of ViT and DeiT, which name them alike."""
    D, H = cfg.d_model, cfg.hidden
    for i in range(cfg.n_layers):
        h, b = f"encoder.layer.{i}.", f"blocks.{i}."
        qkv = [h + f"attention.attention.{n}" for n in ("query", "key", "value")]
        m.qkv(qkv, [D, D, D], b + "attn", D, cfg)  # split: as stored
        m.linear(h + "attention.output.dense", b + "attn.out", (D, D))
        m.norm(h + "layernorm_before", b + "ln_attn", D)
        m.linear(h + "intermediate.dense", b + "mlp.up", (H, D))
        m.linear(h + "output.dense", b + "mlp.down", (D, H))
        m.norm(h + "layernorm_after", b + "ln_mlp", D)
    m.norm("layernorm", "ln_f", D)
    m.ignore_prefix("pooler.")  # the pooler: not part of our model


def map_vit_embeddings(m: Mapper, cfg: ModelConfig) -> None:
    """ViT's (and DeiT's) `embeddings.*` onto ours: [CLS] (then [DIST] with cfg.distill_token), the positions of
    those tokens and the patches, the patch projection."""
    D, C, P, N = cfg.d_model, cfg.n_channels, cfg.patch_size, cfg.n_patches
    e = "embeddings."
    m.take(e + "cls_token", "embed.cls", (1, 1, D))
    if cfg.distill_token:
        m.take(e + "distillation_token", "embed.dist", (1, 1, D))
    m.take(e + "position_embeddings", "embed.pos", (1, cfg.n_prefix + N, D))
    m.take(e + "patch_embeddings.projection.weight", "embed.proj.weight", (D, C, P, P))
    m.take(e + "patch_embeddings.projection.bias", "embed.proj.bias", (D,))
    m.ignore(e + "mask_token")  # masked image modelling only


def convert_vit(hf_state: State, cfg: ModelConfig) -> State:
    """ViTModel (unprefixed) or ViTForImageClassification (`vit.` prefix, `classifier.`) tensors → ours."""
    m = Mapper(strip(hf_state, "vit.", "embeddings.cls_token"), "vit")
    map_vit_embeddings(m, cfg)
    map_vit_encoder(m, cfg)
    if cfg.n_classes:
        m.linear("classifier", "head", (cfg.n_classes, cfg.d_model))
    return m.done()


def read_prep(folder: Path, hf: dict, cfg: ModelConfig) -> ImagePrep:
    """preprocessor_config.json's resize (and centre crop, when it asks for one), rescale and normalisation
    (ViTImageProcessor's defaults without one)."""
    require_rgb(cfg, "vit")
    path = folder / "preprocessor_config.json"
    pre = {}
    if path.is_file():
        try:
            pre = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    try:
        prep = hf_prep(pre, cfg.image_size, class_names(hf, cfg.n_classes))
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    if prep.size != (cfg.image_size, cfg.image_size) and prep.do_resize:  # no image could ever be read
        raise CheckpointError(f"{path}: images of {prep.size[0]}×{prep.size[1]} after preprocessing; the model reads "
                              f"{cfg.image_size}²")
    return prep


FAMILY = Family(
    "vit", "ViT: ViTModel and ViTForImageClassification checkpoints with preprocessor_config.json", vit_config,
    convert_vit, lambda cfg: "ViTForImageClassification" if cfg.n_classes else "ViTModel", image_prep=read_prep)
