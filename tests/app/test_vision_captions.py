"""The Vision page's captions are worded from the numbers they describe (mean attention distance by depth, the
position embeddings' grid), the answer reads as a label, and an upload of another aspect ratio is told so."""

from __future__ import annotations

import io

import numpy as np
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import image_capture
from attnlab.app.vision_captions import aspect_note, distance_caption, position_caption
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.registry import load
from PIL import Image

from tests.app.conftest import ok, open_page


def test_distance_caption_follows_the_numbers():
    flat = np.full((4, 4), 16.0) + np.linspace(-1, 1, 4)[None]
    assert "stays about the same at every depth" in distance_caption(flat, 4)
    assert "layer 0: 16.0 px (15.0–17.0)" in distance_caption(flat, 4)
    grow = flat * np.array([1, 1.5, 2, 3])[:, None]
    assert "grows with depth (the last layer looks 3.0× as far as the first)" in distance_caption(grow, 4)
    assert "shrinks with depth" in distance_caption(grow[::-1], 4)
    assert distance_caption(flat, 4, (2, 2)).endswith(f"gives {4 * (0 + 1 + 1 + 2 ** 0.5) / 4:.1f} px.")


def test_position_caption_follows_the_grid():
    rows = cols = 4
    r, c = np.divmod(np.arange(16), 4)
    near = np.exp(-np.hypot(r[:, None] - r[None], c[:, None] - c[None]))  # [16, 16]: a learned grid
    assert "learned the 2-D layout" in position_caption(near.reshape(16, rows, cols), (rows, cols))
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(16, 16))
    noise = (noise + noise.T) / 2
    assert "show no grid" in position_caption(noise.reshape(16, rows, cols), (rows, cols))


def test_aspect_note():
    assert aspect_note((32, 32, 3), (32, 32)) is None and aspect_note((64, 64, 3), (32, 32)) is None
    note = aspect_note((32, 48, 3), (32, 32))
    assert "48×32" in note and "1.50 → 1.00" in note and "narrower" in note


def test_the_page_says_what_its_numbers_show():
    at = open_page("vision")
    ok(at)
    vit = load("lecture-vit")
    sample = shape_images(6, 0, "eval", 32)[0]
    run = image_capture(vit, sample.image)
    grid = vit.patch_grid
    caps = [c.value for c in at.caption]
    patch = 32 // grid[0]
    assert distance_caption(vision.mean_attention_distance(run, grid, patch), patch, grid) in caps
    assert position_caption(vision.position_similarity(vit), grid) in caps
    text = " ".join(m.value for m in at.markdown)
    assert "True label: **" in text and "(right)" not in text and "(wrong)" not in text


def test_an_upload_of_another_aspect_ratio_is_told():
    img = np.zeros((40, 80, 3), np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    at = open_page("vision", v_source="upload")
    at.file_uploader(key="v_upload").set_value(("wide.png", buf.getvalue(), "image/png")).run()
    assert any("80×40" in i.value and "proportions changed" in i.value for i in at.info)
