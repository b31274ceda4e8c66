"""`attnlab train`: train one bundled lecture model (seeded, CPU-friendly, resumable)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from model.lecture.train_command import add_arguments

    p = sub.add_parser("train", help="train a bundled lecture model (lecture-decoder, lecture-encoder, lecture-encdec)")
    add_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from model.lecture.train_command import run as train_run

    return train_run(args)
