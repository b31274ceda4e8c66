"""`attnlab capture`: write every site's pattern, scores and mask to an .npz file."""

from __future__ import annotations

import sys

import numpy as np
from attnlab.cli.commands.common import (
    add_device_args,
    add_image_arg,
    add_model_args,
    load_model,
    model_inputs,
)
from attnlab.cli.errors import UsageError
from attnlab.model.config import BACKENDS


def add_parser(sub) -> None:
    p = sub.add_parser("capture", help="capture attention of every site to an .npz file")
    add_model_args(p)
    add_device_args(p)
    add_image_arg(p)
    p.add_argument("--backend", choices=BACKENDS, default="eager",
                   help="attention kernel: eager (the plain softmax maths, default), sdpa or flash (PyTorch's fused "
                        "kernels); the saved patterns are recomputed exactly from q and k whichever ran")
    p.add_argument("--out", required=True, help="output .npz path")
    p.set_defaults(run=run)


def capture_arrays(lm, inputs, backend: str) -> dict[str, np.ndarray]:
    """{tokens, ids, src_tokens?, src_ids?, SITE/pattern, SITE/scores (not for a transformers view), SITE/mask}
    for batch element 0."""
    run = lm.run(inputs=inputs, backend=backend)
    out = {"tokens": np.array(run.tokens, dtype=str), "ids": np.array(run.ids, dtype=np.int64)}
    if run.src_tokens is not None:
        out["src_tokens"] = np.array(run.src_tokens, dtype=str)
        out["src_ids"] = np.array(run.src_ids, dtype=np.int64)
    for site, rec in run.records.items():
        out[f"{site}/pattern"] = rec.pattern().astype(np.float32)  # [H, q, k]
        if lm.capabilities.has_qk:  # a transformers view returns weights only
            out[f"{site}/scores"] = rec.scores().astype(np.float32)  # [H, q, k], raw scaled, unmasked
        out[f"{site}/mask"] = rec.mask_for().astype(bool)  # [q, k]
    return out


def unknown_words(lm, arrays: dict) -> list[tuple[str, int, str]]:
    """(which side, position, word) of every token that became the tokenizer's unknown token."""
    unk = getattr(lm.tokenizer, "unk_id", None) if lm.tokenizer is not None else None
    if unk is None:
        return []
    return [(side, i, str(arrays[f"{pre}tokens"][i])) for side, pre in (("text", ""), ("source", "src_"))
            if f"{pre}ids" in arrays for i in np.flatnonzero(arrays[f"{pre}ids"] == unk).tolist()]


def run(args) -> int:
    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz, got {args.out!r}")
    lm = load_model(args.model, args)
    if not lm.reads_image and args.text is None and args.src_text is None:
        raise UsageError("capture needs --text (an encoder–decoder: --src-text, and --text for a target prefix)")
    arrays = capture_arrays(lm, model_inputs(lm, args), args.backend)
    unknown = unknown_words(lm, arrays)
    if unknown:
        words = ", ".join(f"{w!r} ({side} {i})" for side, i, w in unknown[:8]) + (" …" if len(unknown) > 8 else "")
        print(f"attnlab capture: warning: {len(unknown)} word(s) are outside {lm.name}'s vocabulary and were read as "
              f"[UNK]: {words}. The saved ids show them; for English text use minilm.", file=sys.stderr)
    try:
        np.savez_compressed(args.out, **arrays)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror}") from None
    print(f"wrote {args.out}: {len(arrays)} arrays, {len([k for k in arrays if k.endswith('/pattern')])} sites")
    return 0
