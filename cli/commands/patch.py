"""`attnlab patch`: activation patching between a clean and a corrupted prompt of equal token length — the
share of the clean–corrupted logit difference each patched activation restores.

    attnlab patch --model M --clean T --corrupt T2 --answer A --wrong B [--layers 0,3] [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("patch", help="activation patching: the share of the clean–corrupted logit difference "
                                     "restored per (layer, position), per (layer, head) and per head and position")
    p.add_argument("--model", required=True, help="a decoder: a model name (see `attnlab models`) or a folder")
    p.add_argument("--clean", required=True, help="the clean prompt")
    p.add_argument("--corrupt", required=True, help="the corrupted prompt (the same number of tokens)")
    p.add_argument("--answer", required=True, help="the clean prompt's answer (one token)")
    p.add_argument("--wrong", required=True, help="the corrupted prompt's answer (one token)")
    p.add_argument("--layers", default=None,
                   help="comma-separated layers of the head × position sweep (default: every layer on a small "
                        "model, else the layer of the head that restores most)")
    p.add_argument("--backend", choices=("eager", "sdpa", "flash"), default="sdpa", help="attention backend")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    import numpy as np
    from attnlab.analysis.probes.patching import activation_patching
    from attnlab.model.inputs import InputError

    layers = None
    if args.layers:
        try:
            layers = [int(x) for x in args.layers.split(",")]
        except ValueError:
            raise InputError(f"--layers must be comma-separated integers, got {args.layers!r}") from None
    lm = load_model(args.model)
    p = activation_patching(lm, args.clean, args.corrupt, args.answer, args.wrong, layers=layers,
                            backend=args.backend)
    if args.json:
        print_json(p.to_json())
        return 0
    print(f"{lm.name}: logit({p.answer!r}) − logit({p.wrong!r}) clean {p.ld_clean:+.3f}, corrupted "
          f"{p.ld_corrupt:+.3f}; patching the whole stream restores {100 * p.all_restored:.2f} %")
    print(f"runs {p.runs}, seconds {', '.join(f'{k} {v:.1f}' for k, v in p.seconds.items())}")
    print("residual stream (layer, position): largest restored shares")
    for i, q in zip(*np.unravel_index(np.argsort(-np.abs(p.resid), axis=None)[:6], p.resid.shape)):
        print(f"  L{i:<3} {q:>3} {p.clean[q]!r:<14} {100 * p.resid[i, q]:+7.1f} %")
    print("head outputs (layer, head), every position: largest restored shares")
    for i, h in zip(*np.unravel_index(np.argsort(-np.abs(p.heads), axis=None)[:6], p.heads.shape)):
        print(f"  L{i:<3} head {h:<3} {100 * p.heads[i, h]:+7.1f} %")
    for i, a in p.head_pos.items():
        h, q = np.unravel_index(np.abs(a).argmax(), a.shape)
        print(f"layer {i}, head × position: largest L{i} head {h} at {q} {p.clean[q]!r}: {100 * a[h, q]:+.1f} %")
    return 0
