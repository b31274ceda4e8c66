"""The Vision page (/vision) with AppTest: the default view, each option, uploads (a PNG, non-image bytes, an
oversized file and image), exports and the payload — figures checked against the analysis they draw."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import image_capture
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.registry import load, model_choices
from PIL import Image

from tests.app.conftest import arr, ok, open_page, specs, titled, widget, z_of

pytestmark = pytest.mark.skipif("lecture-vit" not in model_choices(kind="image"), reason="lecture-vit not bundled")
MODEL = "lecture-vit"


@pytest.fixture(scope="module")
def vit():
    return load(MODEL)


def _sample(seed: int = 0, i: int = 0):
    return shape_images(6, seed, "eval", 32)[i]


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _overlay(at) -> np.ndarray:
    fig = next(s for s in specs(at) if s["layout"].get("meta", {}).get("grid") and
               [t["type"] for t in s["data"]][:2] == ["image", "heatmap"] and "tiles" not in s["layout"]["meta"])
    return z_of(fig["data"][1])


def test_default_view_draws_the_sample_and_cls_attention(vit):
    at = open_page("vision")
    ok(at)
    assert at.query_params["vit_model"] == MODEL and at.query_params["v_map"] == "attention"
    assert at.selectbox(key="vit_model").options == model_choices(kind="image")  # image models only
    s = _sample()
    img = titled(at, "The image as lecture-vit reads it")
    assert [t["type"] for t in img["data"]] == ["image", "scatter", "scatter"]  # image, patch grid, outline
    png = Image.open(io.BytesIO(base64.b64decode(img["data"][0]["source"].split(",", 1)[1])))
    np.testing.assert_array_equal(np.asarray(png), s.image)
    run = image_capture(vit, s.image)
    np.testing.assert_allclose(_overlay(at), vision.patch_map_cls(run, 0, None, 0), atol=1e-6)
    pred = at.dataframe[0].value
    assert list(pred["class"]) == list(run.top_tokens[0])
    np.testing.assert_allclose(pred["probability"], run.top_probs[0], rtol=1e-6)
    report = at.dataframe[1].value
    assert list(report["map"]) == ["attention", "rollout", "attention norm", "value zeroing", "gradient rollout",
                                   "relevance", "input × gradient", "integrated gradients", "attention × gradient"]
    region = vision.patch_region(s.mask, (8, 8))
    assert report["share inside"].iloc[1] == pytest.approx(vision.region_share(vision.rollout_map(run), region))
    assert report["chance"].iloc[0] == pytest.approx(region.mean())
    mosaic = next(x for x in specs(at) if x["layout"].get("meta", {}).get("tiles") == 4)
    assert [a["text"] for a in mosaic["layout"]["annotations"]] == [f"head {h}" for h in range(4)]
    dist = titled(at, "Mean attention distance")
    assert len(dist["data"]) == 4 and len(arr(dist["data"][0]["y"])) == 4
    np.testing.assert_allclose(arr(dist["data"][2]["y"]), vision.mean_attention_distance(run, (8, 8), 4)[:, 2])
    pos = titled(at, "Position embeddings")
    assert z_of(pos["data"][0]).shape == (8 * 9 - 1, 8 * 9 - 1)
    qk = titled(at, "queries and keys of 6 images")
    assert [len(arr(t["x"])) for t in qk["data"]] == [6 * 65, 6 * 65]
    assert "query · CLS (position 0)<br>sample 0: " in qk["data"][0]["text"][0]


def test_each_option_changes_the_map(vit):
    at = open_page("vision", v_seed=3, v_sample=2)
    ok(at)
    s = _sample(3, 2)
    run = image_capture(vit, s.image)
    widget(at, "v_layer").set_value(1).run()
    at.selectbox(key="v_head").set_value(2).run()
    at.selectbox(key="v_query").set_value(10).run()  # patch 1,1
    ok(at)
    assert at.query_params["v_layer"] == "1" and at.query_params["v_head"] == "2" and at.query_params["v_query"] == "10"
    np.testing.assert_allclose(_overlay(at), vision.patch_map_cls(run, 1, 2, 10), atol=1e-6)
    fig = titled(at, "layer 1, head 2, from 1,1")
    assert any(t.get("name") == "query patch" for t in fig["data"])
    mosaic = next(x for x in specs(at) if x["layout"].get("meta", {}).get("tiles") == 4)
    z = z_of(mosaic["data"][1])
    want = vision.patch_map_cls(run, 1, 3, 10)
    np.testing.assert_allclose(z[:8, 27:35], want / want.max(), rtol=1e-5)  # head 3: the 4th tile of the row

    at.button_group(key="v_map").set_value("rollout").run()
    at.button_group(key="v_fusion").set_value("max").run()
    at.slider(key="v_discard").set_value(0.5).run()
    ok(at)
    np.testing.assert_allclose(_overlay(at), vision.rollout_map(run, "max", 0.5), atol=1e-6)
    at.button_group(key="v_map").set_value("gradient rollout").run()
    at.selectbox(key="v_target").set_value("below").run()
    ok(at)
    inputs = vit.encode_image(s.image)
    np.testing.assert_allclose(_overlay(at), vision.grad_rollout_map(vit, inputs, 3, 0.5), atol=1e-6)
    at.button_group(key="v_map").set_value("relevance").run()
    ok(at)
    np.testing.assert_allclose(_overlay(at), vision.relevance_map(vit, inputs, 3), atol=1e-6)
    assert at.query_params["v_map"] == "relevance" and at.query_params["v_target"] == "below"
    at.selectbox(key="v_qk_site").set_value("blocks.0.attn").run()
    widget(at, "v_qk_head").set_value(1).run()
    ok(at)
    assert "blocks.0.attn, head 1" in titled(at, "queries and keys of")["layout"]["title"]["text"]


def test_a_fused_backend_draws_the_same_map():
    eager, sdpa = open_page("vision", v_head=1), open_page("vision", v_head=1, backend="sdpa")
    ok(sdpa)
    assert sdpa.query_params["backend"] == "sdpa"
    np.testing.assert_allclose(_overlay(sdpa), _overlay(eager), atol=1e-5)


def test_exports_hold_the_maps(vit, monkeypatch):
    import attnlab.app.downloads

    calls = {}
    real = attnlab.app.downloads.downloads
    monkeypatch.setattr(attnlab.app.downloads, "downloads", lambda name, **kw: calls.update({name: kw}) or real(name, **kw))
    at = open_page("vision", v_map="rollout", v_fusion="max")
    ok(at)
    assert {"⬇ CSV", "⬇ NPZ", "⬇ JSON"} <= {b.proto.label for b in at.get("download_button")}
    run = image_capture(vit, _sample().image)
    want = vision.rollout_map(run, "max", 0.0)
    got = calls["vision"]
    np.testing.assert_allclose(got["json_obj"]["maps"]["rollout"], want)
    assert got["json_obj"]["map"] == "rollout" and got["json_obj"]["prediction"][0][0] == run.top_tokens[0][0]
    assert [r["map"] for r in got["json_obj"]["region_share"]] == ["attention", "rollout", "attention norm",
                                                                     "value zeroing", "gradient rollout",
                                                                     "relevance", "input × gradient",
                                                                     "integrated gradients", "attention × gradient"]
    lines = got["csv"].splitlines()
    assert len(lines) == 9 and lines[0].startswith("rollout,col 0") and lines[1].startswith("row 0,")
    assert float(lines[1].split(",")[1]) == pytest.approx(want[0, 0])
    assert got["npz"]["heads"].shape == (4, 8, 8) and got["npz"]["distance"].shape == (4, 4)
    qk = calls["vision-qk"]["csv"]
    assert len(qk) == 2 * 6 * 65 and set(qk["kind"]) == {"query", "key"}


def test_upload_of_a_png_is_read_at_the_model_size(vit):
    big = np.kron(_sample(5, 1).image, np.ones((3, 3, 1), np.uint8))  # 96×96: resized to 32×32 by the model
    at = open_page("vision", v_source="upload")
    ok(at)
    assert at.info and not titled_or_none(at, "reads it")
    at.file_uploader(key="v_upload").set_value(("shapes.png", _png(big), "image/png")).run()
    ok(at)
    fig = titled(at, "The image as lecture-vit reads it")
    assert [t["type"] for t in fig["data"]] == ["image", "scatter"]  # no ground truth for an upload
    assert fig["layout"]["meta"]["size"] == [32, 32]
    run = image_capture(vit, big)
    np.testing.assert_allclose(_overlay(at), vision.patch_map_cls(run, 0, None, 0), atol=1e-6)
    assert "known answer region" in " ".join(c.value for c in at.caption)
    assert "upload shapes.png" in titled(at, "queries and keys of 7 images")["data"][0]["text"][0]


@pytest.mark.parametrize("name, data, says", [
    ("notes.png", b"this is not an image at all", "not a PNG or JPEG image"),
    ("huge.png", b"\x89PNG" + b"\0" * 1_000_001, "the limit is 1,000,000"),
])
def test_bad_uploads_are_a_message(name, data, says):
    at = open_page("vision", v_source="upload")
    at.file_uploader(key="v_upload").set_value((name, data, "image/png")).run()
    assert not at.exception
    assert len(at.error) == 1 and says in at.error[0].value and "Traceback" not in at.error[0].value
    assert not titled_or_none(at, "reads it")


def test_an_image_with_too_many_pixels_is_a_message():
    tall = np.zeros((5000, 4000, 3), np.uint8)  # 20 M pixels, a small PNG
    data = _png(tall)
    assert len(data) < 1_000_000
    at = open_page("vision", v_source="upload")
    at.file_uploader(key="v_upload").set_value(("tall.png", data, "image/png")).run()
    assert not at.exception
    assert len(at.error) == 1 and "4000×5000 pixels; the limit is 16,000,000 pixels" in at.error[0].value
    assert not titled_or_none(at, "reads it")


def test_payload_is_under_two_megabytes():
    at = open_page("vision")
    ok(at)
    sent = sum(len(el.proto.spec.encode("utf-8")) for el in at.get("plotly_chart"))
    assert 20_000 < sent < 2_000_000, sent
    assert all(json.loads(el.proto.spec) for el in at.get("plotly_chart"))


def titled_or_none(at, text: str):
    found = [s for s in specs(at) if text in (s["layout"].get("title", {}).get("text") or "")]
    return found[0] if found else None


@pytest.mark.parametrize("kind, method", [("input × gradient", "input_x_gradient"),
                                          ("integrated gradients", "integrated_gradients"),
                                          ("attention × gradient", "attention_x_gradient")])
def test_gradient_attribution_maps_and_their_region_rows(vit, kind, method):
    from attnlab.analysis.probes.attributions import attribute

    at = open_page("vision", v_map=kind, v_target="below")
    ok(at)
    s = _sample()
    a = attribute(vit, vit.encode_image(s.image), method, 0, 3)
    want = vision.patch_scores(a.row)
    np.testing.assert_allclose(_overlay(at), want, atol=1e-5)
    report = at.dataframe[1].value.set_index("map")
    region = vision.patch_region(s.mask, (8, 8))
    assert report.loc[kind, "share inside"] == pytest.approx(vision.region_share(want, region), abs=1e-5)
    assert report.loc[kind, "top patch inside"] == vision.pointing_hit(want, region)
    if method == "integrated_gradients":
        assert a.completeness_error <= 0.01 and a.baseline == "every patch's embedding zero"


@pytest.mark.parametrize("kind, method", [("attention norm", "attention_norm"), ("value zeroing", "value_zeroing")])
def test_context_mixing_maps_follow_the_layer_and_token(vit, kind, method):
    from attnlab.analysis.probes.context_mixing import context_mixing

    at = open_page("vision", v_map=kind, v_layer=2, v_query=10)
    ok(at)
    s = _sample()
    layers = context_mixing(vit, vit.encode_image(s.image), method)  # [L, 65, 65]
    want = vision.patch_scores(layers[2, 10])
    np.testing.assert_allclose(_overlay(at), want, atol=1e-6)
    assert titled(at, f"{kind}, layer 2, from 1,1")
    report = at.dataframe[1].value.set_index("map")
    region = vision.patch_region(s.mask, (8, 8))
    assert report.loc[kind, "share inside"] == pytest.approx(vision.region_share(want, region), abs=1e-6)
