"""Pixels equal to the checkpoint's own image processor (≤ 1e-6): ViT (resize), DeiT (resize to a square, then
centre crop), CLIP (shortest edge, then centre crop), each on non-square images, its resample filter, mean and
std; compare-hf prepares pixels on each side and fails on a difference."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.images import ImagePrep, center_crop
from attnlab.model.parity import PROBE_SIZE, compare_hf, probe_image, within_tolerance
from attnlab.model.parity_inputs import TOL_PIXELS

from tests.family_grid import TINY, make

PROCESSORS = {  # name: (model_type, transformers processor class, its kwargs)
    "vit": ("vit", "ViTImageProcessor", dict(size={"height": 16, "width": 16}, resample=3,
                                             image_mean=[0.2, 0.4, 0.6], image_std=[0.3, 0.2, 0.1])),
    "deit": ("deit", "DeiTImageProcessor", dict(size={"height": 21, "width": 21}, crop_size={"height": 16,
                                                                                               "width": 16})),
    "clip": ("clip", "CLIPImageProcessor", dict(size={"shortest_edge": 19}, crop_size={"height": 16, "width": 16})),
    "clip-vision": ("clip_vision_model", "CLIPImageProcessor", dict(size={"shortest_edge": 16}, crop_size=16,
                                                                      resample=1)),
}
IMAGES = [(45, 61), (61, 45), (12, 30), (16, 16)]  # (H, W): wide, tall, smaller than the crop, square


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    import transformers

    out = {}
    for name, (mt, proc, kw) in PROCESSORS.items():
        cls, conf = TINY[mt]
        folder = make(tmp_path_factory.mktemp(name), mt, cls, **conf)
        getattr(transformers, proc)(**kw).save_pretrained(folder)  # replaces make()'s ViTImageProcessor
        out[name] = folder
    return out


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_pixels_equal_the_image_processor(folders, name):
    import transformers

    lm = load_hf_folder(folders[name])
    processor = transformers.AutoImageProcessor.from_pretrained(str(folders[name]))
    assert type(processor).__name__.startswith(PROCESSORS[name][1])
    for i, (h, w) in enumerate(IMAGES):
        image = probe_image((h, w), seed=i)
        ours = lm.encode_image(image).pixels.numpy()
        theirs = processor(images=image, return_tensors="np")["pixel_values"]
        assert ours.shape == theirs.shape == (1, 3, 16, 16)
        assert np.abs(ours - theirs).max() <= TOL_PIXELS, (name, (h, w), np.abs(ours - theirs).max())


def test_crop_matters(folders):
    """The old preparation (a resize straight to the crop size) differs from the processor by far more than 1e-6."""
    import transformers

    lm = load_hf_folder(folders["deit"])
    assert lm.image.crop and lm.image.resize == (21, 21) and lm.image.resample == 3
    image = probe_image(PROBE_SIZE)
    old = ImagePrep(size=(16, 16), mean=lm.image.mean, std=lm.image.std, resample=3).tensor(image).numpy()
    theirs = transformers.AutoImageProcessor.from_pretrained(str(folders["deit"]))(
        images=image, return_tensors="np")["pixel_values"]
    assert np.abs(old - theirs).max() > 0.1


def test_center_crop_offsets():
    image = np.arange(5 * 7 * 1, dtype=np.uint8).reshape(5, 7, 1)
    assert center_crop(image, (2, 3))[..., 0].tolist() == [[9, 10, 11], [16, 17, 18]]  # top 1, left 2
    padded = center_crop(image, (8, 7))[..., 0]  # 3 rows of zeros: 2 above (ceil), 1 below
    assert padded[:2].sum() == 0 and padded[-1].sum() == 0 and padded[2].tolist() == list(range(7))


@pytest.mark.parametrize("name", ["deit", "clip"])
def test_compare_hf_prepares_pixels_on_each_side(folders, name, monkeypatch):
    report = compare_hf(str(folders[name]))
    assert report["max_abs_pixels"] <= TOL_PIXELS and within_tolerance(report)
    monkeypatch.setattr(ImagePrep, "array", lambda self, im: np.zeros((3, 16, 16), np.float32))
    broken = compare_hf(str(folders[name]))
    assert broken["max_abs_pixels"] > 0.1 and not within_tolerance(broken)


def test_prep_round_trips():
    prep = ImagePrep(size=(16, 16), resize=(19,), crop=True, resample=3)
    assert ImagePrep.from_dict(prep.to_dict()) == prep
    assert ImagePrep.from_dict({k: v for k, v in prep.to_dict().items() if k not in ("resize", "crop")}).crop is False


def test_old_feature_extractor_files(folders, tmp_path):
    """Old checkpoints' preprocessor_config.json (feature_extractor_type, sizes as one number): CLIP reads the
    number as its shortest edge, DeiT as a square; both equal AutoImageProcessor on that file."""
    import json
    import shutil

    import transformers

    files = {"clip": {"feature_extractor_type": "CLIPFeatureExtractor", "size": 19, "crop_size": 16,
                      "do_center_crop": True, "do_resize": True, "do_normalize": True, "resample": 3,
                      "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258,
                                                                                       0.27577711]},
             "deit": {"feature_extractor_type": "DeiTFeatureExtractor", "size": 21, "crop_size": 16,
                      "do_center_crop": True, "do_resize": True, "do_normalize": True, "resample": 3,
                      "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}}
    for name, pre in files.items():
        folder = shutil.copytree(folders[name], tmp_path / name)
        (folder / "preprocessor_config.json").write_text(json.dumps(pre))
        lm = load_hf_folder(folder)
        assert lm.image.resize == ((19,) if name == "clip" else (21, 21))
        processor = transformers.AutoImageProcessor.from_pretrained(str(folder))
        for h, w in IMAGES:
            image = probe_image((h, w))
            theirs = processor(images=image, return_tensors="np")["pixel_values"]
            assert np.abs(lm.encode_image(image).pixels.numpy() - theirs).max() <= TOL_PIXELS, (name, h, w)
