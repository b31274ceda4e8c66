"""DeiT (distillation token, two classifiers) and CLIP's vision tower (pre-LN, quick GELU, no patch bias): converted
tiny random models equal transformers on every attention pattern (≤ 1e-5), hidden states and logits (≤ 1e-4)."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.families.vision_towers import convert_clip_vision, convert_deit, deit_heads, vision_config
from attnlab.model.patches import patch_labels

from tests.hf_fixtures import quiet_transformers
from tests.model.parity import (
    TOL_ATTENTION,
    TOL_HIDDEN,
    TOL_LOGITS,
    attention_diff,
    max_abs,
    ours,
    patterns,
    perturbed,
    saved_state,
)

transformers = pytest.importorskip("transformers")

DEIT = {
    "a": dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=24, image_size=16,
              patch_size=4),
    "b": dict(hidden_size=12, num_attention_heads=3, num_hidden_layers=3, intermediate_size=20, image_size=12,
              patch_size=6, num_channels=2, qkv_bias=False, hidden_act="gelu_new"),
}
CLIP = {
    "a": dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=24, image_size=16,
              patch_size=4),
    "b": dict(hidden_size=24, num_attention_heads=2, num_hidden_layers=3, intermediate_size=32, image_size=18,
              patch_size=6, hidden_act="gelu"),
}
HEADS = {"none": "DeiTModel", "classes": "DeiTForImageClassification",
         "teacher": "DeiTForImageClassificationWithTeacher"}


def build(conf_cls, model_cls, kw, **extra):
    quiet_transformers()
    conf = getattr(transformers, conf_cls)(**kw, **extra)
    conf._attn_implementation = "eager"
    torch.manual_seed(0)
    return perturbed(getattr(transformers, model_cls)(conf), scale=0.2)


def _pixels(cfg):
    g = torch.Generator().manual_seed(2)
    return torch.randn(1, cfg.n_channels, cfg.image_size, cfg.image_size, generator=g)


def _check(model, cfg, pix, hf_attn, hf_hidden, hf_logits=None):
    sites = [f"blocks.{i}.attn" for i in range(cfg.n_layers)]
    for backend in ("eager", "sdpa", "flash"):
        pats, out = patterns(lambda b=backend: model(pix, backend=b), sites)
        assert attention_diff(pats, hf_attn) <= TOL_ATTENTION
        assert max_abs(out.hidden, hf_hidden) <= TOL_HIDDEN
        if hf_logits is not None:
            assert max_abs(out.logits, hf_logits) <= TOL_LOGITS
        else:
            assert out.logits is None


@pytest.mark.parametrize("shape", list(DEIT))
@pytest.mark.parametrize("heads", list(HEADS))
def test_deit_parity(shape, heads):
    hf = build("DeiTConfig", HEADS[heads], DEIT[shape], num_labels=5)
    state = saved_state(hf)
    assert deit_heads(state) == heads
    cfg = vision_config(hf.config.to_dict(), "deit", heads)
    converted = convert_deit(state, cfg)
    model = ours(cfg, converted)
    assert set(model.state_dict()) == set(converted)  # every tensor of ours comes from the checkpoint
    assert cfg.max_len == 2 + cfg.n_patches
    pix = _pixels(cfg)
    with torch.no_grad():
        base = hf.deit if heads != "none" else hf
        ref = base(pixel_values=pix, output_attentions=True)
        logits = hf(pixel_values=pix).logits if heads != "none" else None
    _check(model, cfg, pix, ref.attentions, ref.last_hidden_state, logits)


@pytest.mark.parametrize("shape", list(CLIP))
@pytest.mark.parametrize("whole", [False, True], ids=["CLIPVisionModel", "CLIPModel"])
def test_clip_vision_parity(shape, whole):
    if whole:
        vision = transformers.CLIPVisionConfig(**CLIP[shape]).to_dict()
        text = dict(vocab_size=30, hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16,
                    max_position_embeddings=10)
        hf = build("CLIPConfig", "CLIPModel", {}, vision_config=vision, text_config=text, projection_dim=8)
        tower, family = hf.vision_model, "clip"
    else:
        hf = build("CLIPVisionConfig", "CLIPVisionModel", CLIP[shape])
        tower, family = getattr(hf, "vision_model", hf), "clip_vision_model"
    cfg = vision_config(hf.config.to_dict(), family)
    assert (cfg.patch_bias, cfg.embed_norm, cfg.mlp) == (False, True, CLIP[shape].get("hidden_act", "quick_gelu"))
    converted = convert_clip_vision(saved_state(hf), cfg)
    model = ours(cfg, converted)
    assert set(model.state_dict()) == set(converted)
    pix = _pixels(cfg)
    with torch.no_grad():
        ref = tower(pixel_values=pix, output_attentions=True)
        hidden = tower.post_layernorm(ref.last_hidden_state)  # ours: the final norm on every token
        assert torch.allclose(hidden[:, 0], ref.pooler_output, atol=1e-6)  # row 0 is CLIP's pooled output
    _check(model, cfg, pix, ref.attentions, hidden)


def test_deit_token_labels_and_refusals():
    assert patch_labels(2, distill=True) == ["CLS", "DIST", "0,0", "0,1", "1,0", "1,1"]
    hf = build("DeiTConfig", "DeiTModel", DEIT["a"])
    cfg = vision_config(hf.config.to_dict(), "deit")
    state = dict(saved_state(hf))
    del state["embeddings.distillation_token"]
    with pytest.raises(CheckpointError, match="lacks embeddings.distillation_token"):
        convert_deit(state, cfg)
    with pytest.raises(CheckpointError, match="activation 'relu'"):
        vision_config({**hf.config.to_dict(), "hidden_act": "relu"}, "deit")
    with pytest.raises(CheckpointError, match="lacks vision_config"):
        vision_config({"model_type": "clip"}, "clip")
