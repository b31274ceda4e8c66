"""Arguments and helpers shared by sub-commands."""

from __future__ import annotations

import json
import sys

DEFAULT_TEXT = "The cat sat on the mat because the mat was warm."


def add_model_args(p, text_required: bool = False) -> None:
    p.add_argument("--model", required=True, help="a model name (see `attnlab models`) or a folder")
    p.add_argument("--text", required=text_required, default=None, help="input text (a target prefix for an encoder–decoder)")
    p.add_argument("--src-text", default=None, help="source text for an encoder–decoder")


def add_device_args(p) -> None:
    """--device auto|cpu|cuda and --dtype auto|float32|bfloat16|float16 (resolved by model.device)."""
    from attnlab.model.device import DEVICES, DTYPES

    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where the model runs (auto: cuda when this machine has a CUDA GPU, else cpu)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="the model's precision (auto: float32 on the CPU, bfloat16 on CUDA)")
    p.add_argument("--device-map", default=None, metavar="MAP",
                   help="spread the model over GPUs, CPU memory and disk (auto, balanced, sequential; accelerate's "
                        "dispatch); --device is then ignored")
    p.add_argument("--device-memory", default=None, metavar="DEV=SIZE,…",
                   help="with --device-map: the most each device may hold, e.g. 0=20GiB,1=20GiB,cpu=60GiB")
    p.add_argument("--offload-folder", default=None, metavar="DIR",
                   help="with --device-map: where weights that fit nowhere else go (disk offload)")


def placement_args(args) -> dict:
    """load()'s device_map, max_memory and offload_folder from --device-map/--device-memory/--offload-folder,
    checked (InputError, one line)."""
    from attnlab.model.dispatch import parse_max_memory, placement

    kw = {"device_map": getattr(args, "device_map", None), "max_memory": parse_max_memory(getattr(args, "device_memory", None)),
          "offload_folder": getattr(args, "offload_folder", None)}
    placement(**kw)  # refuses --device-memory / --offload-folder without --device-map, an unknown map
    return kw


def run_settings(args) -> tuple[str, object]:
    """(device, torch dtype) of --device/--dtype; InputError (exit 2, one line) for cuda without a GPU."""
    from attnlab.model.device import resolve

    return resolve(getattr(args, "device", "auto"), getattr(args, "dtype", "auto"))


def load_model(name: str, args=None):
    """The model `name`, on the device and in the dtype of args' --device/--dtype (default: as loaded)."""
    from attnlab.model.registry import load

    if args is None:
        return load(name)
    device, dtype = run_settings(args)
    return load(name, dtype=dtype, device=device, **placement_args(args))


def default_texts(lm) -> tuple[str, str | None]:
    """A sensible (text, src_text) for a model when the user gave none."""
    try:
        from attnlab.model.lecture.samples import load_samples

        samples = load_samples(lm.name)
        if samples:
            s = samples[0]
            return s.get("text", ""), s.get("src_text")
    except Exception:  # noqa: BLE001 — samples are optional for non-bundled models
        pass
    if lm.reads_source:
        return "", DEFAULT_TEXT
    return DEFAULT_TEXT, None


def resolve_texts(lm, text, src_text) -> tuple[str, str | None]:
    """(text, source text) to run: the model's defaults for what was not given (an encoder–decoder given only
    --src-text: an empty target prefix). --src-text on a model without a source is refused."""
    if src_text is not None and not lm.reads_source:
        from attnlab.cli.errors import UsageError

        raise UsageError(f"--src-text is the source of an encoder–decoder; {lm.name} is {lm.a_kind} and reads "
                         "--text only")
    if text is None and src_text is None:
        return default_texts(lm)
    if lm.reads_source:
        return text or "", src_text
    return text, src_text


def add_image_arg(p) -> None:
    """--image FILE: the PNG or JPEG a vision model reads (default: a generated shape image)."""
    p.add_argument("--image", default=None, metavar="FILE",
                   help="vision models: a PNG or JPEG to read (default: the first held-out shape image)")


def model_inputs(lm, args):
    """The Inputs a command runs: a vision model's --image (else the sample image), else --text/--src-text
    (else the model's default text). --image on a text model, or --text on a vision model, is refused."""
    from attnlab.cli.errors import UsageError

    image = getattr(args, "image", None)
    if lm.reads_image:
        if args.text is not None or args.src_text is not None:
            raise UsageError(f"{lm.name} is a vision transformer: give --image FILE, not --text")
        return lm.encode_image(sample_image() if image is None else read_image(image))
    if image is not None:
        raise UsageError(f"--image is for vision models; {lm.name} reads text (--text)")
    return lm.encode(*resolve_texts(lm, args.text, args.src_text))


def read_image(path: str):
    """uint8 [H, W, 3] of the PNG/JPEG at `path` (model.images.decode_image's limits); one line when it is
    missing, unreadable or not such an image."""
    from attnlab.cli.errors import UsageError
    from attnlab.model.images import MAX_IMAGE_BYTES, decode_image

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)  # one byte over the limit is enough to refuse it
    except FileNotFoundError:
        raise UsageError(f"--image: no such file {path}") from None
    except OSError as e:
        raise UsageError(f"--image: cannot read {path}: {e.strerror}") from None
    return decode_image(data)


def sample_image():
    """The image a ViT command reads by default: the first eval-split shape image (uint8 [32, 32, 3])."""
    from attnlab.model.lecture.shapes import shape_images

    return shape_images(1, 0, "eval")[0].image


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
