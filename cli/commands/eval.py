"""`attnlab eval`: per-task answer accuracy of a lecture model on fresh held-out examples."""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="held-out accuracy per task of a lecture model (lecture-vit: per class)")
    p.add_argument("--model", required=True, help="a lecture model name (see `attnlab models`) or its folder")
    p.add_argument("--n", type=int, default=200, help="number of fresh held-out examples (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out examples (default 0)")
    p.add_argument("--detail", action="store_true",
                   help="also the answers scored, the share of examples with every answer right, and both per "
                        "example kind")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.lecture.evaluate import evaluate
    from attnlab.model.inputs import InputError
    from attnlab.model.lecture import vocabulary

    if not 1 <= args.n <= 100_000:
        raise InputError(f"--n must be between 1 and 100,000, not {args.n}")
    lm = load_model(args.model)
    if lm.reads_image:
        return _run_images(lm, args)
    tok = getattr(lm.tokenizer, "tok", None)
    if tok is None or not set(vocabulary(story=False)) <= set(tok.get_vocab(with_added_tokens=True)):
        raise InputError(f"{args.model} is not a lecture model (its vocabulary lacks the lecture corpus words)")
    if lm.fills_masks and lm.cfg.output_head_kind != "mlm":
        raise InputError(f"{args.model} is an encoder without a masked-LM head; nothing to evaluate")
    report = evaluate(lm, args.n, args.seed, detail=args.detail)
    if args.json:
        print_json(report)
    else:
        print(text_report(report))
    return 0


def text_report(report: dict) -> str:
    """The report as lines: per task the examples, the accuracy over answer tokens (an example may hold
    several answers) and, with --detail, the answers scored, the exact-match share and the same per kind."""
    lines = []
    for task, m in report["tasks"].items():
        lines.append(_line(task, m))
        lines += [_line(f"  {kind}", k) for kind, k in m.get("kinds", {}).items()]
    return "\n".join(lines)


def _line(name: str, m: dict) -> str:
    out = f"{name:<14} examples={m['n']:<5} accuracy={m['accuracy']:.1%} of answers"
    if "answers" in m:
        out += f" (answers={m['answers']}, every answer right in {m['exact']:.1%} of examples)"
    return out


def _run_images(lm, args) -> int:
    """lecture-vit: accuracy on fresh held-out shape images, overall and per class."""
    from attnlab.lecture.evaluate_vit import evaluate_images
    from attnlab.model.inputs import InputError

    try:
        report = evaluate_images(lm, args.n, args.seed)
    except ValueError as e:
        raise InputError(str(e)) from None
    if args.json:
        print_json(report)
    else:
        print(f"red-vs-blue  n={report['n']:<5} accuracy={report['accuracy']:.1%}")
        for c, m in report["per_class"].items():
            acc = "n/a" if m["accuracy"] is None else f"{m['accuracy']:.1%}"
            print(f"  {c:<10} n={m['n']:<5} accuracy={acc}")
    return 0
