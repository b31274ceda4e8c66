"""Issue 29, item 3: the bundled lecture-vit is what the Vision page says of it — held-out accuracy ≥ 97%, mean
attention distance growing with depth, position embeddings that show the 2-D grid — and the paper-picture numbers
the card and the page use are computed from the model (analysis.probes.image_run.paper_pictures)."""

import numpy as np
import pytest
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import image_capture, paper_pictures
from attnlab.app.vision_captions import GRID_R, GROWS, distance_caption, position_caption
from attnlab.lecture.evaluate_vit import evaluate_images
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.registry import load


@pytest.fixture(scope="module")
def vit():
    return load("lecture-vit")


@pytest.fixture(scope="module")
def pictures(vit):
    return paper_pictures(vit, [ex.image for ex in shape_images(40, 0, "eval")])


def test_paper_pictures_are_the_per_image_numbers_averaged(vit, pictures):
    ims = [ex.image for ex in shape_images(40, 0, "eval")]
    per = [vision.mean_attention_distance(image_capture(vit, im), (8, 8), 4) for im in ims]  # [L, H] each
    np.testing.assert_allclose(pictures["distance"], np.mean(per, 0), rtol=1e-9)
    assert pictures["distance"].shape == (4, 4)
    assert pictures["trend"]["ratio"] == pytest.approx(pictures["distance"][-1].mean() / pictures["distance"][0].mean())
    assert pictures["grid_r"] == pytest.approx(vision.grid_correlation(vision.position_similarity(vit), (8, 8)))
    assert pictures["uniform"] == pytest.approx(vision.uniform_distance((8, 8), 4))


def test_heldout_accuracy_at_least_97_percent(vit):
    r = evaluate_images(vit, 1000, seed=1)
    assert r["accuracy"] >= 0.97 and all(c["accuracy"] >= 0.9 for c in r["per_class"].values())


def test_position_embeddings_show_the_grid(vit, pictures):
    assert pictures["grid_r"] >= GRID_R
    sim = vision.position_similarity(vit)
    assert "learned the 2-D layout" in position_caption(sim, (8, 8))


def test_attention_distance_grows_with_depth(vit, pictures):
    tr = pictures["trend"]
    assert tr["ratio"] >= GROWS and tr["layer_mean"][0] < pictures["uniform"]  # the first layer looks near
    run = image_capture(vit, shape_images(6, 0, "eval")[0].image)  # the Vision page's default sample
    assert "grows with depth" in distance_caption(vision.mean_attention_distance(run, (8, 8), 4), 4, (8, 8))
