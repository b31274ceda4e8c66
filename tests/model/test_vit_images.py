"""Image decoding (safe, clear errors), preprocessing, and the shape generator's masks."""

import io

import numpy as np
import pytest
from attnlab.model.images import ImagePrep, decode_image
from attnlab.model.inputs import InputError
from attnlab.model.lecture.shapes import BLUE, CLASSES, RED, shape_images, split_of
from PIL import Image


def encoded(im: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def test_png_rgba_is_composited_over_white():
    a = np.zeros((6, 5, 4), np.uint8)
    a[..., 0] = 200
    a[:3, :, 3] = 255  # top half opaque red, bottom half transparent
    out = decode_image(encoded(Image.fromarray(a, "RGBA"), "PNG"))
    assert out.shape == (6, 5, 3) and out.dtype == np.uint8
    assert out[0, 0].tolist() == [200, 0, 0] and out[5, 0].tolist() == [255, 255, 255]


def test_jpeg_and_grayscale_decode_to_rgb():
    g = Image.fromarray(np.full((8, 9), 120, np.uint8), "L")
    out = decode_image(encoded(g, "JPEG"))
    assert out.shape == (8, 9, 3) and abs(int(out[4, 4, 0]) - 120) <= 2
    assert (out[..., 0] == out[..., 1]).all()


@pytest.mark.parametrize("data, kw, message", [
    (b"", {}, "empty"),
    (b"this is not an image at all", {}, "not a PNG or JPEG"),
    (b"x" * 2000, {"max_bytes": 1000}, "2,000 bytes"),
])
def test_bad_bytes(data, kw, message):
    with pytest.raises(InputError, match=message):
        decode_image(data, **kw)


def test_oversized_image_is_refused_before_decoding():
    data = encoded(Image.new("RGB", (40, 30)), "PNG")
    with pytest.raises(InputError, match="40×30 pixels"):
        decode_image(data, max_pixels=1000)
    big = encoded(Image.new("L", (4200, 4000)), "PNG")  # 16.8 M pixels, a small file
    assert len(big) < 1_000_000
    with pytest.raises(InputError, match="pixels"):
        decode_image(big)


def test_truncated_and_other_formats():
    png = encoded(Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 30, 3), dtype=np.uint8)), "PNG")
    with pytest.raises(InputError, match="decoded|not a PNG"):
        decode_image(png[: len(png) // 2])
    with pytest.raises(InputError, match="not a PNG or JPEG"):
        decode_image(encoded(Image.new("RGB", (4, 4)), "GIF"))


def test_preprocessing_resizes_and_normalises():
    prep = ImagePrep(size=(4, 6), mean=(0.5, 0.25, 0.0), std=(0.5, 0.25, 1.0))
    x = prep.tensor(np.full((8, 12, 3), 255, np.uint8))
    assert x.shape == (1, 3, 4, 6)
    np.testing.assert_allclose(x[0, :, 0, 0].numpy(), [1.0, 3.0, 1.0], rtol=1e-6)
    assert ImagePrep.from_dict(prep.to_dict()) == prep


def _centre(pixels: np.ndarray) -> np.ndarray:
    """(y, x) centre of a shape's bounding box, in pixels."""
    ys, xs = np.nonzero(pixels)
    return np.array([(ys.min() + ys.max() + 1) / 2, (xs.min() + xs.max() + 1) / 2])


def test_masks_are_the_red_and_blue_pixels_and_the_label_their_relation():
    images = shape_images(60, 3, "train") + shape_images(20, 3, "eval")
    words = {"left": "left of", "right": "right of", "above": "above", "below": "below"}
    for ex in images:
        red, blue = ((ex.image == np.array(c, np.uint8)).all(-1) for c in (RED, BLUE))
        assert np.array_equal(ex.mask, red | blue) and red.any() and blue.any()
        assert ex.image.shape == (32, 32, 3) and ex.mask.shape == (32, 32)
        dy, dx = _centre(red) - _centre(blue)  # every shape's pixels span its box: these are the boxes' centres
        assert abs(abs(dx) - abs(dy)) >= 2  # never a near tie
        want = (0 if dx < 0 else 1) if abs(dx) > abs(dy) else (2 if dy < 0 else 3)
        assert CLASSES[ex.label] == ex.label_name == CLASSES[want]
        assert ex.description.startswith("a red ") and f" {words[ex.label_name]} a blue " in ex.description
        assert ex.description.count(", ") <= 3  # 0–3 distractors
    assert {ex.label for ex in images} == set(range(len(CLASSES)))


def test_shapes_are_seeded_and_split():
    a, b = shape_images(5, 7, "eval"), shape_images(5, 7, "eval")
    assert all(np.array_equal(x.image, y.image) for x, y in zip(a, b))
    assert all(split_of(x.image, x.label) == "eval" for x in a)
    assert all(split_of(x.image, x.label) == "train" for x in shape_images(20, 7, "train"))
    with pytest.raises(ValueError, match="split"):
        shape_images(1, 0, "test")


def test_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    buf = io.BytesIO()
    Image.new("RGB", (6, 3), (10, 200, 10)).save(buf, format="JPEG", exif=exif)
    assert decode_image(buf.getvalue()).shape == (6, 3, 3)  # was 3 high × 6 wide
