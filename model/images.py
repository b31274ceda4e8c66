"""Images in: safe decoding of uploaded bytes (Pillow) and a ViT's preprocessing (resize, rescale, normalise;
Pillow + numpy, as Hugging Face's ViTImageProcessor does it)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from attnlab.model.inputs import InputError
from PIL import Image, ImageOps

MAX_IMAGE_BYTES = 1_000_000  # an upload
MAX_IMAGE_PIXELS = 16_000_000  # width × height, checked from the header before any pixel is decoded
FORMATS = ("PNG", "JPEG")
RESAMPLE = {0: Image.Resampling.NEAREST, 1: Image.Resampling.LANCZOS, 2: Image.Resampling.BILINEAR,
            3: Image.Resampling.BICUBIC, 4: Image.Resampling.BOX, 5: Image.Resampling.HAMMING}


def decode_image(data: bytes, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS,
                 formats: tuple[str, ...] = FORMATS) -> np.ndarray:
    """PNG/JPEG bytes → uint8 [H, W, 3] RGB (any mode converted; transparency over white; EXIF orientation
    applied). InputError for
    anything else: empty, too many bytes, not an image, another format, too many pixels, corrupt data."""
    if not data:
        raise InputError("the image is empty; upload a PNG or JPEG file")
    if len(data) > max_bytes:
        raise InputError(f"the image file has {len(data):,} bytes; the limit is {max_bytes:,}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data), formats=list(formats))  # reads the header only
            w, h = im.size
            if w * h > max_pixels or w < 1 or h < 1:
                raise InputError(f"the image is {w}×{h} pixels; the limit is {max_pixels:,} pixels")
            im.load()
            im = ImageOps.exif_transpose(im)  # a phone photo's EXIF orientation, applied
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"the image has too many pixels; the limit is {max_pixels:,}") from None
    except Image.UnidentifiedImageError:
        raise InputError(f"the file is not a {' or '.join(formats)} image") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise InputError(f"the image could not be decoded (corrupt or truncated?): {str(e)[:120]}") from None
    return to_rgb(im)


def to_rgb(im: Image.Image) -> np.ndarray:
    """Any Pillow mode → uint8 [H, W, 3]; an alpha channel is composited over white."""
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(bg, rgba)
    return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


@dataclass(frozen=True)
class ImagePrep:
    """How a ViT wants its pixels: resize to size (H, W), x·rescale, then (x − mean) / std per channel."""

    size: tuple[int, int]
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    rescale: float = 1 / 255
    resample: int = 2  # Pillow's code: 2 = bilinear (ViTImageProcessor's default)
    do_resize: bool = True
    do_normalize: bool = True
    class_names: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"size": list(self.size), "mean": list(self.mean), "std": list(self.std), "rescale": self.rescale,
                "resample": self.resample, "do_resize": self.do_resize, "do_normalize": self.do_normalize,
                "class_names": list(self.class_names)}

    @classmethod
    def from_dict(cls, d: dict) -> ImagePrep:
        return cls(size=tuple(d["size"]), mean=tuple(d["mean"]), std=tuple(d["std"]), rescale=float(d["rescale"]),
                   resample=int(d["resample"]), do_resize=bool(d["do_resize"]),
                   do_normalize=bool(d["do_normalize"]), class_names=tuple(d.get("class_names", ())))

    def array(self, image: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] → float32 [3, h, w] ready for the model."""
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
            raise InputError(f"an image must be uint8 [H, W, 3], got {image.dtype} {image.shape}")
        h, w = self.size
        if self.do_resize and image.shape[:2] != (h, w):
            image = np.asarray(Image.fromarray(image).resize((w, h), RESAMPLE[self.resample]))
        x = image.astype(np.float32) * np.float32(self.rescale)  # [H, W, C]
        if self.do_normalize:
            x = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1))  # [H, W, C] -> [C, H, W]

    def tensor(self, images) -> torch.Tensor:
        """One image or a list → float32 [B, 3, h, w]."""
        images = [images] if isinstance(images, np.ndarray) and images.ndim == 3 else images
        return torch.from_numpy(np.stack([self.array(im) for im in images]))  # [B, C, H, W]


def hf_prep(pre: dict, image_size: int, class_names: tuple[str, ...] = ()) -> ImagePrep:
    """A Hugging Face preprocessor_config.json (ViTImageProcessor) → ImagePrep; defaults as transformers'."""
    size = pre.get("size", image_size)
    if isinstance(size, dict):
        size = (size.get("height", image_size), size.get("width", image_size))
    elif isinstance(size, int):
        size = (size, size)
    return ImagePrep(size=tuple(int(s) for s in size), mean=tuple(pre.get("image_mean", (0.5, 0.5, 0.5))),
                     std=tuple(pre.get("image_std", (0.5, 0.5, 0.5))), rescale=float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0,
                     resample=int(pre.get("resample", 2)), do_resize=bool(pre.get("do_resize", True)),
                     do_normalize=bool(pre.get("do_normalize", True)), class_names=class_names)
