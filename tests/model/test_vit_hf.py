"""Hugging Face ViT folders (tiny, random, perturbed, written with save_pretrained) ≡ transformers."""

import json

import numpy as np
import pytest
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS, compare_hf, probe_image
from attnlab.model.registry import load

from tests.hf_fixtures import _perturb, quiet_transformers

LABELS = {0: "cat", 1: "dog", 2: "fish"}


def make_vit(folder, classify: bool, seed: int = 0, **kw):
    """A perturbed random ViT (every tensor moved off its init), its preprocessor_config.json beside it."""
    import transformers

    quiet_transformers()
    conf = transformers.ViTConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=48, image_size=16, patch_size=4, id2label=LABELS,
                                            label2id={v: k for k, v in LABELS.items()}), **kw})
    torch.manual_seed(seed)
    cls = transformers.ViTForImageClassification if classify else transformers.ViTModel
    model = cls(conf).eval()
    _perturb(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4, 0.5, 0.6],
                                   image_std=[0.2, 0.3, 0.25]).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("classify, kw", [(True, {}), (False, {}),
                                          (True, {"layer_norm_eps": 1e-6, "hidden_act": "gelu_new", "qkv_bias": False})])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_vit_equals_transformers(tmp_path, classify, kw, backend):
    folder = make_vit(tmp_path / "vit", classify, **kw)
    r = compare_hf(str(folder), backend=backend)
    assert r["n_layers"] == 2 and r["n_heads"] == 4
    assert r["max_abs_attention"] <= TOL_ATTENTION
    assert r["max_abs_hidden"] <= TOL_HIDDEN
    if classify:
        assert r["max_abs_logits"] <= TOL_LOGITS
    else:
        assert r["max_abs_logits"] is None


def test_vit_folder_preprocessing_matches_transformers(tmp_path):
    import transformers

    folder = make_vit(tmp_path / "vit", True)
    lm = load(str(folder))
    assert lm.reads_image and lm.class_names == ["cat", "dog", "fish"] and lm.cfg.norm_eps == 1e-12
    image = probe_image((37, 29))  # resized to 16×16 by both
    ours = lm.encode_image(image).pixels
    proc = transformers.ViTImageProcessor.from_pretrained(str(folder))
    theirs = torch.as_tensor(np.asarray(proc(images=image, return_tensors="np")["pixel_values"]))
    assert ours.shape == theirs.shape == (1, 3, 16, 16)
    assert float((ours - theirs).abs().max()) <= 1e-5
    logits = lm.forward(lm.encode_image(image)).logits
    hf = transformers.ViTForImageClassification.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        assert float((hf(pixel_values=theirs).logits - logits).abs().max()) <= TOL_LOGITS


def test_non_square_vit_is_refused(tmp_path):
    folder = make_vit(tmp_path / "vit", False)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | {"image_size": [16, 32]}))
    with pytest.raises(CheckpointError, match="square"):
        load(str(folder))


def test_a_cached_vit_is_an_image_choice_only(tmp_path, monkeypatch):
    from attnlab.model import registry

    from tests.model.test_hf_cache import add_repo, folder_files

    folder = make_vit(tmp_path / "vit", True)
    root = tmp_path / "hub"
    add_repo(root, "acme/tiny-vit", folder_files(folder))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    assert "acme/tiny-vit" in registry.model_choices(kind="image")
    assert "acme/tiny-vit" not in registry.model_choices()
    lm = registry.load("acme/tiny-vit")
    assert lm.reads_image and lm.class_names == ["cat", "dog", "fish"] and lm.source == "cache:acme/tiny-vit"


@pytest.mark.parametrize("kind", ["vit", "deit", "clip_vision_model"])
def test_a_channel_count_other_than_rgb_is_refused_at_load(tmp_path, kind, capfd):
    """A 1-channel ViT used to load and then stop every image with a traceback ("pixels must be [B, 1, 16, 16],
    got (1, 3, 16, 16)"): its image processor gives RGB. One line at load now, for each vision family."""
    from attnlab.cli.main import main

    from tests import family_grid as G

    cls = {"vit": "ViTModel", "deit": "DeiTModel", "clip_vision_model": "CLIPVisionModel"}[kind]
    folder = G.make(tmp_path / kind, kind, cls, **dict(G.TINY["clip_vision_model"][1], num_channels=1))
    capfd.readouterr()
    assert main(["check", "--model", str(folder)]) == 2
    out, err = capfd.readouterr()
    assert err.strip().splitlines() == [f"attnlab: error: {kind}: num_channels=1 is not supported (images are "
                                        "read as RGB, 3 channels, as its image processor gives them)"]


def test_a_processor_size_the_model_cannot_read_is_refused_at_load(tmp_path):
    """ViTImageProcessor resizing to 24² for a 16² model: transformers' ViT refuses every image it gives, and so
    did ours, but only per image after loading; now the folder is refused once, before any image."""
    import transformers

    folder = make_vit(tmp_path / "vit", False)
    transformers.ViTImageProcessor(size={"height": 24, "width": 24}).save_pretrained(folder)
    with pytest.raises(CheckpointError, match="images of 24×24 after preprocessing; the model reads 16²"):
        load(str(folder))
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}, do_resize=False).save_pretrained(folder)
    lm = load(str(folder))  # no resize: images of the model's own size are read as they come
    assert lm.encode_image(probe_image((16, 16))).pixels.shape == (1, 3, 16, 16)


def test_compare_hf_without_a_preprocessor_config(tmp_path, capfd):
    """No preprocessor_config.json: transformers has no image processor to compare pixels with; compare-hf said
    so with AutoImageProcessor's traceback, now one line in its report, the model itself still compared."""
    from attnlab.cli.main import main

    folder = make_vit(tmp_path / "vit", True)
    (folder / "preprocessor_config.json").unlink()
    r = compare_hf(str(folder))
    assert r["max_abs_pixels"] is None and "no preprocessor_config.json" in r["pixels_note"]
    assert r["max_abs_logits"] <= TOL_LOGITS and r["max_abs_attention"] <= TOL_ATTENTION
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(folder)]) == 0
    out, err = capfd.readouterr()
    assert "pixels            not compared (the folder has no preprocessor_config.json" in out
    assert "Traceback" not in out + err
