"""Hugging Face DeiT and CLIP vision-tower checkpoints → our ModelConfig (arch="vit") and state dict, and their
preprocessing. Pure functions; no `transformers` import.

- DeiT: ViT's layout plus a distillation token after [CLS] (`distill_token`; tokens "CLS", "DIST", patches).
  DeiTForImageClassificationWithTeacher averages a classifier on [CLS] and one on [DIST] (`distill_head`);
  DeiTForImageClassification has the [CLS] classifier only.
- CLIP's vision tower (CLIPVisionModel, or the vision half of a whole CLIPModel, whose text tower and
  projections are knowingly left out): a patch projection without bias (`patch_bias`), a LayerNorm after the
  embeddings (`embed_norm`, CLIP's `pre_layrnorm`), pre-LN blocks with quick GELU. CLIP's `post_layernorm`
  becomes our final norm: transformers applies it to [CLS] only (the pooled output); ours to every token, so
  our hidden states are post_layernorm(last_hidden_state) and row 0 is CLIP's pooled output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, build, require, strip
from attnlab.model.families.vit import _side, class_names, map_vit_embeddings, map_vit_encoder, require_rgb
from attnlab.model.images import ImagePrep, hf_prep

FAMILIES = ("deit", "clip", "clip_vision_model")
CLASSES = {"deit": "DeiTModel", "clip": "CLIPVisionModel", "clip_vision_model": "CLIPVisionModel"}
# CLIPModel's text tower and projections, left out by name (anything else under text_model. is refused)
_CLIP_TEXT = re.compile(r"text_model\.(embeddings\.(token_embedding|position_embedding)\.weight|embeddings\.position_ids"
                        r"|encoder\.layers\.\d+\.(self_attn\.[qkv]_proj|self_attn\.out_proj|layer_norm[12]|mlp\.fc[12])"
                        r"\.(weight|bias)|final_layer_norm\.(weight|bias))|(text|visual)_projection\.weight|logit_scale")
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}


def deit_heads(names) -> str:
    """'teacher' (two classifiers), 'classes' ([CLS] classifier) or 'none' (DeiTModel)."""
    if "cls_classifier.weight" in names:
        return "teacher"
    return "classes" if "classifier.weight" in names else "none"


def vision_fields(hf: dict, family: str) -> dict:
    """The config.json fields of the vision tower: CLIPModel keeps them under vision_config."""
    if family == "clip":
        sub = hf.get("vision_config")
        if not isinstance(sub, dict):
            raise CheckpointError("clip: config.json lacks vision_config")
        return sub
    return hf


def _act(name: str, family: str) -> str:
    if name not in ACTS:
        raise CheckpointError(f"{family}: activation {name!r} is not supported (supported: {', '.join(ACTS)})")
    return ACTS[name]


def vision_config(hf: dict, family: str, heads: str = "none") -> ModelConfig:
    """A DeiT or CLIP config.json dict → ModelConfig (pre-LN ViT)."""
    if family not in FAMILIES:
        raise CheckpointError(f"model_type {family!r} is not one of {', '.join(FAMILIES)}")
    v = vision_fields(hf, family)
    require(v, family, "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
             "image_size", "patch_size")
    common = dict(arch="vit", d_model=v["hidden_size"], n_heads=v["num_attention_heads"],
                  n_layers=v["num_hidden_layers"], d_mlp=v["intermediate_size"],
                  image_size=_side(v["image_size"], "image_size", family),
                  patch_size=_side(v["patch_size"], "patch_size", family), n_channels=int(v.get("num_channels", 3)),
                  positional="learned", norm="pre", bias=True, qkv_layout="split")
    if family == "deit":
        n = (len(v.get("id2label") or {}) or int(v.get("num_labels", 2))) if heads != "none" else 0
        return build(**common, n_classes=n, mlp=_act(v.get("hidden_act", "gelu"), family),
                      qkv_bias=bool(v.get("qkv_bias", True)), norm_eps=float(v.get("layer_norm_eps", 1e-12)),
                      distill_token=True, distill_head=heads == "teacher")
    return build(**common, mlp=_act(v.get("hidden_act", "quick_gelu"), family), patch_bias=False, embed_norm=True,
                  norm_eps=float(v.get("layer_norm_eps", 1e-5)))


def convert_deit(hf_state: State, cfg: ModelConfig) -> State:
    """DeiTModel (unprefixed) or DeiTForImageClassification(WithTeacher) (`deit.` prefix) tensors → ours."""
    D = cfg.d_model
    m = Mapper(strip(hf_state, "deit.", "embeddings.cls_token"), "deit")
    map_vit_embeddings(m, cfg)  # cfg.distill_token: DeiT's [DIST] after [CLS]
    map_vit_encoder(m, cfg)
    if cfg.distill_head:
        m.linear("cls_classifier", "head", (cfg.n_classes, D))
        m.linear("distillation_classifier", "head_dist", (cfg.n_classes, D))
    elif cfg.n_classes:
        m.linear("classifier", "head", (cfg.n_classes, D))
    return m.done()


def convert_clip_vision(hf_state: State, cfg: ModelConfig) -> State:
    """CLIPVisionModel or CLIPModel (`vision_model.` prefix; text tower and projections left out) tensors → ours."""
    state = {k: v for k, v in hf_state.items() if not _CLIP_TEXT.fullmatch(k)}
    s = strip(state, "vision_model.", "embeddings.class_embedding")
    D, H, C, P, N = cfg.d_model, cfg.hidden, cfg.n_channels, cfg.patch_size, cfg.n_patches
    m = Mapper(s, "clip")
    e = "embeddings."
    m.out["embed.cls"] = m.pop(e + "class_embedding", (D,)).reshape(1, 1, D)  # [D] -> [1, 1, D]
    m.out["embed.pos"] = m.pop(e + "position_embedding.weight", (1 + N, D))[None]  # [1 + N, D] -> [1, 1 + N, D]
    m.take(e + "patch_embedding.weight", "embed.proj.weight", (D, C, P, P))
    m.ignore(e + "position_ids")
    m.norm("pre_layrnorm", "embed.norm", D)  # sic: transformers' name
    for i in range(cfg.n_layers):
        h, b = f"encoder.layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        m.qkv([a + f"{x}_proj" for x in "qkv"], [D, D, D], b + "attn", D, cfg)  # split: as stored
        m.linear(a + "out_proj", b + "attn.out", (D, D))
        m.norm(h + "layer_norm1", b + "ln_attn", D)
        m.linear(h + "mlp.fc1", b + "mlp.up", (H, D))
        m.linear(h + "mlp.fc2", b + "mlp.down", (D, H))
        m.norm(h + "layer_norm2", b + "ln_mlp", D)
    m.norm("post_layernorm", "ln_f", D)
    return m.done()


def read_prep(folder: Path, hf: dict, cfg: ModelConfig) -> ImagePrep:
    """preprocessor_config.json → ImagePrep: resize (DeiT: to a square; CLIP: the shortest edge), centre crop,
    rescale and normalise as the checkpoint's image processor does (the class its file names, else the family's;
    that class's defaults for a key it leaves out).
    No file: a resize straight to the model's image size."""
    mt = hf.get("model_type", "")
    require_rgb(cfg, mt)
    path = folder / "preprocessor_config.json"
    pre, defaults = {}, None
    if path.is_file():
        try:
            pre = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path} is not valid JSON ({e})") from None
        defaults = "DeiTImageProcessor" if mt == "deit" else "CLIPImageProcessor"  # unless the file names its own
    try:
        prep = hf_prep(pre, cfg.image_size, class_names(vision_fields(hf, mt) if mt == "clip" else hf, cfg.n_classes),
                       defaults)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    if prep.size != (cfg.image_size, cfg.image_size):
        raise CheckpointError(f"{path}: images of {prep.size[0]}×{prep.size[1]} after preprocessing; the model reads "
                              f"{cfg.image_size}²")
    return prep
