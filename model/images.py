"""Images in: safe decoding of uploaded bytes (Pillow) and a ViT's preprocessing (resize, centre crop, rescale,
normalise; Pillow + numpy, as Hugging Face's image processors (ViT, DeiT, CLIP) do it)."""

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
    """How a ViT wants its pixels, as Hugging Face's image processors prepare them: resize (to `resize`, else
    straight to `size`), centre-crop to `size` when `crop`, x·rescale, then (x − mean) / std per channel.

    resize: () = to size; (e,) = the shorter side to e, the longer in proportion (CLIP's shortest_edge);
    (h, w) = to h × w (DeiT's 256² before its 224² crop). `size` (h, w) is what the model reads."""

    size: tuple[int, int]
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    rescale: float = 1 / 255
    resample: int = 2  # Pillow's code: 2 = bilinear (ViTImageProcessor's default)
    do_resize: bool = True
    do_normalize: bool = True
    class_names: tuple[str, ...] = field(default=())
    resize: tuple[int, ...] = ()
    crop: bool = False

    def to_dict(self) -> dict:
        return {"size": list(self.size), "mean": list(self.mean), "std": list(self.std), "rescale": self.rescale,
                "resample": self.resample, "do_resize": self.do_resize, "do_normalize": self.do_normalize,
                "class_names": list(self.class_names), "resize": list(self.resize), "crop": self.crop}

    @classmethod
    def from_dict(cls, d: dict) -> ImagePrep:
        return cls(size=tuple(d["size"]), mean=tuple(d["mean"]), std=tuple(d["std"]), rescale=float(d["rescale"]),
                   resample=int(d["resample"]), do_resize=bool(d["do_resize"]),
                   do_normalize=bool(d["do_normalize"]), class_names=tuple(d.get("class_names", ())),
                   resize=tuple(int(x) for x in d.get("resize", ())), crop=bool(d.get("crop", False)))

    def resized_size(self, h: int, w: int) -> tuple[int, int]:
        """(H, W) after the resize step for an h × w image (transformers' get_resize_output_image_size)."""
        if len(self.resize) == 1:
            short, long = sorted((h, w))
            new_short, new_long = self.resize[0], int(self.resize[0] * long / short)
            return (new_long, new_short) if w <= h else (new_short, new_long)
        return tuple(self.resize) if self.resize else tuple(self.size)

    def array(self, image: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] → float32 [3, h, w] ready for the model."""
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
            raise InputError(f"an image must be uint8 [H, W, 3], got {image.dtype} {image.shape}")
        if self.do_resize:
            h, w = self.resized_size(*image.shape[:2])
            if image.shape[:2] != (h, w):
                image = np.asarray(Image.fromarray(image).resize((w, h), RESAMPLE[self.resample]))
        if self.crop:
            image = center_crop(image, self.size)
        x = (image.astype(np.float64) * self.rescale).astype(np.float32)  # [H, W, C]; float64 first, as transformers
        if self.do_normalize:
            x = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1))  # [H, W, C] -> [C, H, W]

    def tensor(self, images) -> torch.Tensor:
        """One image or a list → float32 [B, 3, h, w]."""
        images = [images] if isinstance(images, np.ndarray) and images.ndim == 3 else images
        return torch.from_numpy(np.stack([self.array(im) for im in images]))  # [B, C, H, W]


def center_crop(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[H, W, C] → the centre [h, w, C] (transformers' center_crop: top = (H − h) // 2; zero-padded, centred with
    the odd pixel after, when the image is smaller)."""
    H, W = image.shape[:2]
    h, w = size
    if H < h or W < w:  # pad to at least (h, w) first
        ph, pw = max(h, H), max(w, W)
        padded = np.zeros((ph, pw, image.shape[2]), image.dtype)
        top, left = -(-(ph - H) // 2), -(-(pw - W) // 2)  # ceil, as transformers pads
        padded[top:top + H, left:left + W] = image
        image, H, W = padded, ph, pw
    top, left = (H - h) // 2, (W - w) // 2
    return image[top:top + h, left:left + w]


def _hw(v, what: str) -> tuple[int, ...]:
    """A preprocessor size: {"height", "width"} or an int → (h, w); {"shortest_edge"} → (e,)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return (v, v)
    if isinstance(v, dict) and isinstance(v.get("height"), int) and isinstance(v.get("width"), int):
        return (v["height"], v["width"])
    if isinstance(v, dict) and set(v) == {"shortest_edge"} and isinstance(v["shortest_edge"], int):
        return (v["shortest_edge"],)
    raise ValueError(f"{what} {v!r} is not a supported size (height/width, shortest_edge or one integer)")


PROCESSOR_DEFAULTS = {  # what an image processor class does for a key its preprocessor_config.json leaves out
    "ViTImageProcessor": {},
    "DeiTImageProcessor": {"size": {"height": 256, "width": 256}, "crop_size": {"height": 224, "width": 224},
                           "do_center_crop": True, "resample": 3},
    "CLIPImageProcessor": {"size": {"shortest_edge": 224}, "crop_size": {"height": 224, "width": 224},
                           "do_center_crop": True, "resample": 3, "image_mean": (0.48145466, 0.4578275, 0.40821073),
                           "image_std": (0.26862954, 0.26130258, 0.27577711)},
}


def hf_prep(pre: dict, image_size: int, class_names: tuple[str, ...] = (), default_class: str | None = None
            ) -> ImagePrep:
    """A Hugging Face preprocessor_config.json → ImagePrep. Missing keys take the defaults of the class it names
    (image_processor_type), else of `default_class`, else ViTImageProcessor's. ValueError for a size it cannot
    read or an unknown class."""
    named = str(pre.get("image_processor_type") or default_class or "ViTImageProcessor").removesuffix("Fast")
    named = named.removesuffix("Pil")
    if named not in PROCESSOR_DEFAULTS:
        raise ValueError(f"image processor {named!r} is not supported ({', '.join(PROCESSOR_DEFAULTS)} are)")
    if named == "CLIPImageProcessor" and isinstance(pre.get("size"), int):  # CLIP reads one number as a short edge
        pre = {**pre, "size": {"shortest_edge": pre["size"]}}
    pre = {"size": {"height": image_size, "width": image_size}, "do_resize": True, "do_center_crop": False,
           "resample": 2, "image_mean": (0.5, 0.5, 0.5), "image_std": (0.5, 0.5, 0.5), "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True} | PROCESSOR_DEFAULTS[named] | pre
    resize = _hw(pre["size"], "size")
    crop = bool(pre["do_center_crop"])
    out = _hw(pre.get("crop_size"), "crop_size") if crop else resize
    if len(out) != 2:
        raise ValueError(f"size {pre['size']!r} without a centre crop gives images of varying shape")
    return ImagePrep(size=tuple(int(s) for s in out), mean=tuple(pre["image_mean"]), std=tuple(pre["image_std"]),
                     rescale=float(pre["rescale_factor"]) if pre["do_rescale"] else 1.0, resample=int(pre["resample"]),
                     do_resize=bool(pre["do_resize"]), do_normalize=bool(pre["do_normalize"]),
                     class_names=class_names, resize=resize if crop else (), crop=crop)
