"""The ViT (arch="vit"): patches, [CLS], positions, token labels, backends, interventions, the loaded model."""

import numpy as np
import pytest
import torch
from attnlab.model import hooks, registry
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.patches import patch_labels, sinusoidal_2d
from attnlab.model.transformer import build_model

IMAGE = np.random.default_rng(0).integers(0, 256, (20, 28, 3), dtype=np.uint8)


def vit_lm(positional="learned", seed=0, **kw):
    cfg = ModelConfig(**{**dict(arch="vit", image_size=16, patch_size=4, n_classes=3, d_model=32, n_heads=4,
                                n_layers=2, positional=positional), **kw})
    torch.manual_seed(seed)
    return LoadedModel("tiny-vit", build_model(cfg).eval(), None, cfg, "random")


@pytest.mark.parametrize("positional", ["learned", "learned2d", "sinusoidal2d", "none"])
def test_shapes_and_labels(positional):
    lm = vit_lm(positional)
    assert lm.cfg.max_len == 17 and lm.patch_grid == (4, 4) and lm.image_size == (16, 16)
    inp = lm.encode_image(IMAGE)
    assert inp.pixels.shape == (1, 3, 16, 16)
    assert inp.tokens == ["CLS", "0,0", "0,1", "0,2", "0,3", "1,0", *inp.tokens[6:]] and inp.tokens[-1] == "3,3"
    assert inp.ids.tolist() == [list(range(17))]
    x = lm.model.embed(inp.pixels)
    assert x.shape == (1, 17, 32)
    pos = lm.model.embed.positions()
    assert (pos is None) == (positional == "none")
    if pos is not None:
        assert pos.shape == (17, 32)
    out = lm.forward(inp)
    assert out.logits.shape == (1, 3) and out.hidden.shape == (1, 17, 32)


def test_patch_embedding_is_a_linear_map_of_each_flattened_patch():
    lm = vit_lm("none")
    pixels = torch.randn(1, 3, 16, 16)
    x = lm.model.embed(pixels)  # [1, 17, D]
    w = lm.model.embed.proj.weight.reshape(32, -1)  # [D, C·p·p]
    patch = pixels[0, :, 4:8, 8:12].reshape(-1)  # row 1, column 2 → token 1 + 1·4 + 2
    torch.testing.assert_close(x[0, 7], w @ patch + lm.model.embed.proj.bias, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x[0, 0], lm.model.embed.cls[0, 0])


def test_two_d_positions():
    t = sinusoidal_2d(3, 8)  # [9, 8]: first half by row, second half by column
    assert torch.equal(t[1, :4], t[2, :4]) and not torch.equal(t[1, :4], t[4, :4])  # same row
    assert torch.equal(t[1, 4:], t[4, 4:]) and not torch.equal(t[1, 4:], t[2, 4:])  # same column
    lm = vit_lm("learned2d")
    e = lm.model.embed
    pos = e.positions()
    torch.testing.assert_close(pos[1 + 2 * 4 + 3], e.pos_row[2] + e.pos_col[3])
    torch.testing.assert_close(pos[0], e.pos_cls)
    assert patch_labels(2) == ["CLS", "0,0", "0,1", "1,0", "1,1"]


@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_eager_equals_fused_on_images(backend):
    lm = vit_lm("learned2d", seed=3)
    inp = lm.encode_image(IMAGE)
    a, b = lm.run(inputs=inp), lm.run(inputs=inp, backend=backend)
    np.testing.assert_allclose(a.matrices("self"), b.matrices("self"), atol=1e-6)
    np.testing.assert_allclose(a.top_probs, b.top_probs, atol=1e-6)
    assert a.tokens == b.tokens and a.top_tokens[0][0] in lm.class_names and len(a.top_ids) == 1


def test_interventions_and_lazy_records():
    lm = vit_lm()
    inp = lm.encode_image(IMAGE)
    clean = lm.forward(inp).logits
    cut = lm.forward(inp, interventions={"blocks.1.attn.hook_pattern": hooks.zero_head(0)}).logits
    assert not torch.allclose(clean, cut)
    run = lm.run(inputs=inp)
    lazy = run.lazy_above(0)
    assert all(r.lazy for r in lazy.records.values())
    np.testing.assert_allclose(lazy.matrices("self"), run.matrices("self"), atol=1e-6)


def test_vit_refuses_text_cache_and_generation():
    lm = vit_lm()
    assert lm.reads_image and not lm.has_cache and lm.has_logits
    with pytest.raises(InputError, match="reads an image"):
        lm.encode("hello")
    with pytest.raises(InputError, match="does not generate"):
        lm.generate("hello")
    with pytest.raises(ValueError, match="KV cache"):
        lm.model.forward_inputs(lm.encode_image(IMAGE), cache=object())
    with pytest.raises(InputError, match="uint8"):
        lm.encode_image(np.zeros((4, 4), np.float32))
    text = registry.load("random-decoder")
    assert not text.reads_image
    with pytest.raises(InputError, match="reads text"):
        _ = text.patch_grid


def test_config_validation():
    with pytest.raises(ValueError, match="multiple"):
        ModelConfig(arch="vit", image_size=18, patch_size=4)
    with pytest.raises(ValueError, match="arch='vit'"):
        ModelConfig(arch="decoder", positional="learned2d")
    with pytest.raises(ValueError, match="positional"):
        ModelConfig(arch="vit", image_size=16, patch_size=4, positional="rope")
    cfg = ModelConfig(arch="vit", image_size=16, patch_size=4, n_classes=3)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_registry_lists_the_vit_for_images_only():
    assert "lecture-vit" in registry.model_choices(kind="image")
    assert "lecture-vit" not in registry.model_choices()
    assert "lecture-vit" not in registry.bundled_names()
    assert "lecture-vit" in registry.bundled_names("all") and "lecture-vit" in registry.known_names()
    lm = registry.load("lecture-vit")
    assert lm.class_names == ["left", "right", "above", "below"]
    assert lm.image_size == (32, 32) and lm.patch_grid == (8, 8)
    assert lm.info()["kind"] == "vision transformer"
    size = sum(p.stat().st_size for p in (registry.BUNDLED_DIR / "lecture-vit").iterdir())
    assert size <= 4_000_000
