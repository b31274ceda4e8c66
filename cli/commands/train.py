"""`attnlab train`: train one bundled lecture model (seeded, CPU-friendly, resumable)."""

from __future__ import annotations

from pathlib import Path

VIT = "lecture-vit"  # trained by model/lecture/train_vit.py
VIT_IGNORES = ("questions", "mask_share", "hint", "hint_steps", "hint_tasks", "context", "mix", "init", "attn_only",
               "one_hop", "weight_decay", "eval_every")


def add_parser(sub) -> None:
    from attnlab.model.lecture.train_command import add_arguments

    p = sub.add_parser("train", help="train a bundled lecture model (lecture-decoder, lecture-encoder, lecture-encdec, "
                                     "lecture-vit)")
    add_arguments(p, more_models=(VIT,))
    p.add_argument("--stop", type=int, default=None, help="lecture-vit: stop after this many steps of the --steps "
                   "schedule")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.cli.errors import UsageError

    for name in ("steps", "stop", "batch", "save_every", "eval_every"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.model == VIT:
        return _train_vit(args)
    if getattr(args, "stop", None) is not None:
        raise UsageError("--stop is lecture-vit's; the text recipes stop at --steps (or resume with --resume)")
    from attnlab.model.lecture.train_command import run as train_run

    return train_run(args)


def _train_vit(args) -> int:

    from attnlab.cli.errors import UsageError
    from attnlab.model.lecture.train_vit import NAME
    from attnlab.model.lecture.train_vit import run as vit_run
    from attnlab.model.registry import BUNDLED_DIR

    unused = [f"--{k.replace('_', '-')}" for k in VIT_IGNORES if getattr(args, k, None) is not None]
    if unused:
        raise UsageError(f"{', '.join(unused)}: text-recipe options; lecture-vit takes --steps, --stop, --batch, --lr, "
                         "--seed, --warmup, --out, --threads, --eval-n, --no-card, --quiet")
    code = vit_run(args)
    if code == 0 and not args.no_card:
        write_vit_card(Path(args.out) if args.out else BUNDLED_DIR / NAME)
    return code


def write_vit_card(folder: Path, n_eval: int = 1000, n_faith: int = 200, n_pictures: int = 100) -> None:
    """Measure (held-out accuracy, image faithfulness) and write lecture-vit's README.md."""
    import json
    import sys

    from attnlab.analysis.faithfulness_images import image_faithfulness
    from attnlab.analysis.image_runs import paper_pictures, sincos_grid
    from attnlab.model.checkpoint import read_config
    from attnlab.model.lecture.card_vit import render_card, write_card
    from attnlab.model.lecture.evaluate_vit import evaluate_images
    from attnlab.model.lecture.shapes import shape_images
    from attnlab.model.registry import load_attnlab_folder

    folder = Path(folder)
    lm = load_attnlab_folder(folder, "lecture-vit", str(folder))
    seed = 1
    evaluation = evaluate_images(lm, n_eval, seed)
    faith = image_faithfulness(lm, n_faith, 0)
    training = read_config(folder)["training"]
    pictures = paper_pictures(lm, [im.image for im in shape_images(n_pictures, 0, "eval")])
    if training.get("sincos"):  # the grid the position embeddings started from
        pictures["grid_r_start"] = sincos_grid(lm.patch_grid[0], lm.cfg.d_model)
    curve = json.loads((folder / "curve.json").read_text()) if (folder / "curve.json").is_file() else None
    text = render_card(lm.cfg, training, evaluation, faith, f"attnlab eval --model lecture-vit --n {n_eval} --seed {seed}",
                       pictures, curve, n_pictures)
    print(f"model card: {write_card(folder, text)}", file=sys.stderr)
