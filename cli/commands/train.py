"""`attnlab train`: train one bundled lecture model (seeded, CPU-friendly, resumable). The arguments and their
checks; the training, evaluation and card are attnlab.lecture's."""

from __future__ import annotations

VIT = "lecture-vit"  # trained by lecture/train_vit.py
VIT_IGNORES = ("questions", "mask_share", "hint", "hint_steps", "hint_tasks", "context", "mix", "init", "attn_only",
               "one_hop", "weight_decay", "eval_every")


def add_parser(sub) -> None:
    from attnlab.lecture.train_command import add_arguments

    p = sub.add_parser("train", help="train a bundled lecture model (lecture-decoder, lecture-encoder, lecture-encdec, "
                                     "lecture-vit)")
    add_arguments(p, more_models=(VIT,))
    p.add_argument("--stop", type=int, default=None, help="lecture-vit: stop after this many steps of the --steps "
                   "schedule")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.cli.errors import UsageError
    from attnlab.lecture.train_command import run as train_run

    for name in ("steps", "stop", "batch", "save_every", "eval_every"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.model == VIT:
        unused = [f"--{k.replace('_', '-')}" for k in VIT_IGNORES if getattr(args, k, None) is not None]
        if unused:
            raise UsageError(f"{', '.join(unused)}: text-recipe options; lecture-vit takes --steps, --stop, --batch, "
                             "--lr, --seed, --warmup, --out, --threads, --eval-n, --no-card, --quiet")
    elif getattr(args, "stop", None) is not None:
        raise UsageError("--stop is lecture-vit's; the text recipes stop at --steps (or resume with --resume)")
    return train_run(args)
