"""Parity's inputs, prepared on each side separately: token ids from our tokenizer and from transformers' own,
pixels from our preprocessing and from the checkpoint's own image processor — so a tokenizer or processor
difference shows as a failed check instead of being hidden by feeding both models the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TOL_PIXELS = 1e-6  # ours vs the checkpoint's image processor, per pixel value


def transformers_tokenizer(folder: str | Path, gguf_file: str | None = None):
    """The tokenizer transformers gives this checkpoint: a GGUF file's own (`gguf_file`); the class its
    tokenizer_config.json names; else tokenizer.json as a plain fast tokenizer (what transformers builds from
    the file itself); else its vocabulary files through AutoTokenizer."""
    import transformers

    folder = Path(folder)
    if gguf_file is not None:
        return transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file, local_files_only=True)
    config = _json(folder / "tokenizer_config.json")
    if config.get("tokenizer_class") or not (folder / "tokenizer.json").is_file():
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    specials = {k: v for k, v in (config | _json(folder / "special_tokens_map.json")).items()
                if k in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "sep_token", "cls_token")}
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), **specials)


def _json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return d if isinstance(d, dict) else {}


def token_report(ours: list[int], folder: str | Path, text: str, pair: str | None = None,
                 gguf_file: str | None = None) -> dict:
    """{"tokens_equal", "first_token_difference"}: our ids against those of transformers' tokenizer for this
    checkpoint (transformers_tokenizer) on the same text; the first position where they differ (an id is None past
    the shorter sequence), or None; `tokens_note` when transformers cannot build it or tokenize the text (then
    tokens_equal is None)."""
    try:
        tokenizer = transformers_tokenizer(folder, gguf_file)
        theirs = list(tokenizer(text, pair)["input_ids"] if pair is not None else tokenizer(text)["input_ids"])
    except Exception as e:  # noqa: BLE001 — its first line is the reason
        return {"tokens_equal": None, "first_token_difference": None,
                "tokens_note": f"transformers' tokenizer failed: {(str(e).splitlines() or [type(e).__name__])[0]}"}
    return {"tokens_equal": ours == theirs, "first_token_difference": first_difference(ours, theirs)}


def first_difference(ours: list[int], theirs: list[int]) -> dict | None:
    """{"position", "ours", "transformers"} at the first differing position (None past a sequence's end)."""
    for i in range(max(len(ours), len(theirs))):
        a = ours[i] if i < len(ours) else None
        b = theirs[i] if i < len(theirs) else None
        if a != b:
            return {"position": i, "ours": a, "transformers": b}
    return None


def pixel_report(ours: np.ndarray, folder: str | Path, image: np.ndarray) -> dict:
    """{"max_abs_pixels"}: our float32 [1, C, H, W] pixels against the checkpoint's own image processor
    (AutoImageProcessor on preprocessor_config.json) for the same uint8 [H, W, 3] image; inf when the shapes
    differ; None with `pixels_note` when transformers has no image processor for the folder (no
    preprocessor_config.json: ours then resizes to the model's size with ViTImageProcessor's defaults)."""
    import transformers

    if not (Path(folder) / "preprocessor_config.json").is_file():
        return {"max_abs_pixels": None, "pixels_note": "the folder has no preprocessor_config.json, so transformers "
                                                       "has no image processor for it"}
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001 — its first line is the reason
        return {"max_abs_pixels": None, "pixels_note": "transformers has no image processor for this folder: "
                                                       f"{(str(e).splitlines() or [type(e).__name__])[0]}"}
    theirs = np.asarray(processor(images=image, return_tensors="np")["pixel_values"], dtype=np.float32)
    if theirs.shape != tuple(ours.shape):
        return {"max_abs_pixels": float("inf"), "pixels_note": f"shapes differ: ours {tuple(ours.shape)}, "
                                                               f"the image processor's {theirs.shape}"}
    return {"max_abs_pixels": float(np.abs(np.asarray(ours, np.float64) - theirs).max())}


def describe_difference(report: dict) -> str | None:
    """One line for a failed token check: where the ids first differ (and why, when a note says)."""
    d = report.get("first_token_difference")
    if d is None:
        return report.get("tokens_note")
    note = report.get("tokens_note")
    return (f"differ at position {d['position']}: ours {d['ours']}, transformers {d['transformers']} "
            "(each side tokenized the text with its own tokenizer)" + (f"; {note}" if note else ""))
