"""`attnlab capture`: write every site's pattern, scores and mask to an .npz file."""

from __future__ import annotations

import numpy as np

from cli.commands.common import add_device_args, add_model_args, load_model
from cli.errors import UsageError
from model.config import BACKENDS


def add_parser(sub) -> None:
    p = sub.add_parser("capture", help="capture attention of every site to an .npz file")
    add_model_args(p, text_required=True)
    add_device_args(p)
    p.add_argument("--backend", choices=BACKENDS, default="eager")
    p.add_argument("--out", required=True, help="output .npz path")
    p.set_defaults(run=run)


def capture_arrays(lm, text: str, src_text: str | None, backend: str) -> dict[str, np.ndarray]:
    """{tokens, src_tokens?, SITE/pattern, SITE/scores, SITE/mask} for batch element 0."""
    run = lm.run(text, src_text, backend=backend)
    out = {"tokens": np.array(run.tokens, dtype=str)}
    if run.src_tokens is not None:
        out["src_tokens"] = np.array(run.src_tokens, dtype=str)
    for site, rec in run.records.items():
        out[f"{site}/pattern"] = rec.pattern().astype(np.float32)  # [H, q, k]
        out[f"{site}/scores"] = rec.scores().astype(np.float32)  # [H, q, k], raw scaled, unmasked
        out[f"{site}/mask"] = rec.mask_for().astype(bool)  # [q, k]
    return out


def run(args) -> int:
    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz, got {args.out!r}")
    lm = load_model(args.model, args)
    arrays = capture_arrays(lm, args.text, args.src_text, args.backend)
    try:
        np.savez_compressed(args.out, **arrays)
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror}") from None
    print(f"wrote {args.out}: {len(arrays)} arrays, {len([k for k in arrays if k.endswith('/pattern')])} sites")
    return 0
