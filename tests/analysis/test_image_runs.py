"""What the Vision page reads from a ViT run: the image as the model reads it, maps by kind, region shares."""

import numpy as np
import pytest
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import (
    gradient_map,
    head_maps,
    image_capture,
    model_view,
    prediction,
    region_report,
    run_map,
)
from attnlab.model.inputs import InputError
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.registry import load, model_choices

pytestmark = pytest.mark.skipif("lecture-vit" not in model_choices(kind="image"), reason="lecture-vit not bundled")


@pytest.fixture(scope="module")
def vit():
    return load("lecture-vit")


@pytest.fixture(scope="module")
def sample():
    return shape_images(1, 7, "eval", 32)[0]


def test_model_view_is_what_the_model_reads(vit, sample):
    big = np.kron(sample.image, np.ones((2, 3, 1), np.uint8))  # [64, 96, 3]
    view = model_view(vit, big)
    assert view.shape == (32, 32, 3) and view.dtype == np.uint8
    np.testing.assert_array_equal(vit.encode_image(view).pixels.numpy(), vit.encode_image(big).pixels.numpy())
    assert model_view(vit, sample.image) is sample.image
    with pytest.raises(InputError, match="uint8"):
        model_view(vit, np.zeros((4, 4), np.float32))


def test_maps_by_kind(vit, sample):
    run = image_capture(vit, sample.image)
    assert len(run.tokens) == 65 and run.tokens[:2] == ["CLS", "0,0"]
    pred = prediction(run)
    assert [n for n, _ in pred] == list(run.top_tokens[0]) and sum(p for _, p in pred) == pytest.approx(1, abs=1e-5)
    heads = head_maps(run, 2, 5)  # [H, 8, 8]
    assert heads.shape == (4, 8, 8)
    np.testing.assert_allclose(heads.mean(0), run_map(run, "attention", layer=2, query=5), rtol=1e-6)  # float32 means
    np.testing.assert_allclose(heads[1], vision.patch_map_cls(run, 2, 1, 5))
    np.testing.assert_allclose(run_map(run, "rollout", fusion="min", discard=0.3), vision.rollout_map(run, "min", 0.3))
    with pytest.raises(ValueError, match="fusion"):
        run_map(run, "rollout", fusion="median")
    with pytest.raises(ValueError, match="gradients"):
        run_map(run, "relevance")
    inputs = vit.encode_image(sample.image)
    np.testing.assert_allclose(gradient_map(vit, sample.image, "gradient rollout", 1, 0.2),
                               vision.grad_rollout_map(vit, inputs, 1, 0.2))
    np.testing.assert_allclose(gradient_map(vit, sample.image, "relevance"), vision.relevance_map(vit, inputs))
    with pytest.raises(ValueError, match="unknown map kind"):
        gradient_map(vit, sample.image, "saliency")


def test_region_report_by_hand():
    region = np.zeros((2, 2))
    region[0, 1] = 1.0
    region[1, 1] = 0.5
    maps = {"a": np.array([[1.0, 3.0], [0.0, 4.0]]), "b": np.array([[5.0, 0.0], [1.0, 0.0]])}
    got = region_report(maps, region)
    assert got[0] == {"map": "a", "share inside": pytest.approx((3 + 2) / 8), "top patch inside": True,
                      "chance": 0.375}
    assert got[1]["share inside"] == 0.0 and got[1]["top patch inside"] is False
