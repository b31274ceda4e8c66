"""The Vision page on the converted vision families: DeiT (two prefix tokens, [CLS] and [DIST]) and CLIP's vision
tower (no classification head: the attention views alone), both 16 px models from tests/family_grid.py."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import image_capture
from attnlab.model import registry
from attnlab.model.lecture.shapes import MIN_SIZE, shape_images, shape_sizes

from tests import family_grid as G
from tests.app.conftest import arr, ok, open_page, specs, titled, z_of

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("vision-fam")


@pytest.fixture
def folders(root, monkeypatch):
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))  # the app loads folders under its allowed roots only
    out = {}
    for mt in ("deit", "clip", "clip_vision_model"):
        cls, conf = G.TINY[mt]
        out[mt] = str(root / mt if (root / mt).is_dir() else G.make(root / mt, mt, cls, **conf))
    return out


def _overlay(at) -> np.ndarray:
    fig = next(s for s in specs(at) if s["layout"].get("meta", {}).get("grid") and
               [t["type"] for t in s["data"]][:2] == ["image", "heatmap"] and "tiles" not in s["layout"]["meta"])
    return z_of(fig["data"][1])


def test_shapes_at_16_px_terminate_and_fit():
    assert shape_sizes(32) == (8, 13)  # lecture-vit's samples are unchanged
    ims = shape_images(6, 0, "eval", 16)
    assert len(ims) == 6 and all(s.image.shape == (16, 16, 3) and 0 < s.mask.sum() < 16 * 16 for s in ims)
    with pytest.raises(ValueError, match=f"at least {MIN_SIZE} pixels"):
        shape_images(1, 0, "eval", MIN_SIZE - 1)


def test_deit_page_maps_skip_both_prefix_tokens(folders):
    at = open_page("vision", vit_model=folders["deit"])
    ok(at)
    lm = registry.load(folders["deit"])
    assert lm.cfg.n_prefix == 2
    s = shape_images(6, 0, "eval", 16)[0]
    run = image_capture(lm, s.image)
    assert run.tokens[:3] == ["CLS", "DIST", "0,0"] and len(run.tokens) == 2 + 16
    cls = _overlay(at)
    assert cls.shape == (4, 4)  # grid² cells
    row = run.records[next(iter(run.records))].pattern(None)[:, 0].mean(0)  # [T]: layer 0's CLS row, mean of heads
    np.testing.assert_allclose(cls.ravel(), row[2:], atol=1e-6)
    np.testing.assert_allclose(cls.sum(), 1 - row[0] - row[1], atol=1e-6)  # the CLS row's mass on the patches
    assert list(at.dataframe[0].value["class"]) == list(run.top_tokens[0])  # DeiT has a head: a prediction
    report = at.dataframe[1].value
    assert len(report) == 9  # every map kind, gradient maps included
    dist = titled(at, "Mean attention distance")
    np.testing.assert_allclose(arr(dist["data"][0]["y"]), vision.mean_attention_distance(run, (4, 4), 4, 2)[:, 0])
    z = z_of(titled(at, "Position embeddings")["data"][0])  # tile (r, c): patch r,c's similarities, NaN gutters
    assert z.shape == (4 * 5 - 1, 4 * 5 - 1)
    sim = vision.position_similarity(lm)  # [16, 4, 4]: the patches' embeddings, [CLS] and [DIST] left out
    np.testing.assert_allclose(z[5:9, 10:14], sim[1 * 4 + 2], atol=1e-6)
    assert z[5 + 1, 10 + 2] == pytest.approx(1.0, abs=1e-5)  # patch 1,2 with itself
    at = open_page("vision", vit_model=folders["deit"], v_map="rollout")
    ok(at)
    np.testing.assert_allclose(_overlay(at), vision.rollout_map(run, prefix=2), atol=1e-6)


@pytest.mark.parametrize("mt", ["clip_vision_model", "clip"])  # CLIPVisionModel, and CLIPModel's vision tower
def test_clip_vision_tower_shows_attention_without_a_prediction(folders, mt):
    at = open_page("vision", vit_model=folders[mt])
    ok(at)
    assert any("has no classification head" in m.value for m in at.markdown)
    lm = registry.load(folders[mt])
    assert lm.cfg.n_classes == 0 and lm.cfg.n_prefix == 1
    run = image_capture(lm, shape_images(6, 0, "eval", 16)[0].image)
    np.testing.assert_allclose(_overlay(at), vision.patch_map_cls(run, 0, None, 0), atol=1e-6)
    report = at.dataframe[0].value  # the only table: the region report, attention maps alone
    assert list(report["map"]) == ["attention", "rollout", "attention norm", "value zeroing"]  # no class needed
    assert report["share inside"].iloc[1] == pytest.approx(vision.region_share(
        vision.rollout_map(run), vision.patch_region(shape_images(6, 0, "eval", 16)[0].mask, (4, 4))))
    dist = titled(at, "Mean attention distance")
    np.testing.assert_allclose(arr(dist["data"][1]["y"]), vision.mean_attention_distance(run, (4, 4), 4)[:, 1])
    assert titled(at, "Position embeddings")


def test_a_bookmarked_text_model_or_missing_folder_is_one_line():
    at = open_page("vision", vit_model="lecture-decoder")
    assert not at.exception and [e.value for e in at.error] == [
        "`lecture-decoder` reads text, not images: choose a Vision Transformer."]
    at = open_page("vision", vit_model="/nonexistent/x")
    assert not at.exception and len(at.error) == 1 and "does not exist" in at.error[0].value
