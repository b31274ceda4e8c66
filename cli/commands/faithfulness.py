"""`attnlab faithfulness`: do attention, rollout, flow, context mixing, relevance and the gradient attributions point at
the answer's source?"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("faithfulness", help="faithfulness benchmark on the lecture tasks: top-1 source per method, "
                                            "and the answer-probability change when each head is zeroed (lecture-vit: "
                                            "pointing game and mass inside the deciding object, per method)")
    p.add_argument("--model", required=True, help="a model name (see `attnlab models`) or a folder")
    p.add_argument("--n", type=int, default=100, help="number of eval examples (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the example draw (default 0)")
    p.add_argument("--no-ablation", action="store_true", help="skip the head ablation")
    p.add_argument("--methods", default=None, metavar="A,B,…",
                   help="score only these methods, comma-separated as the JSON's `methods` keys spell them "
                        "(default all: last_layer, head_mean, rollout, flow, attention_norm, value_zeroing, relevance, "
                        "input_x_gradient, integrated_gradients, attention_x_gradient)")
    p.add_argument("--image", default=None, metavar="FILE",
                   help="vision models: not scored here (a file has no known object outline); see the message")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--ship", action="store_true",
                   help="bundled text models: write the Rollout page's default report (40 examples, seed 0, every "
                        "method, no ablation) beside the checkpoint, so a fresh install reads it instead of computing "
                        "it (run after retraining; the other options are ignored)")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.faithfulness.benchmark import MAX_EXAMPLES, faithfulness, top_heads
    from attnlab.model.inputs import InputError

    if not 1 <= args.n <= MAX_EXAMPLES:
        raise InputError(f"--n must be between 1 and {MAX_EXAMPLES}, got {args.n}")
    methods = parse_methods(args.methods)
    lm = load_model(args.model)
    if args.image is not None:
        from attnlab.cli.errors import UsageError

        raise UsageError("faithfulness scores generated shape images, whose red and blue objects' pixels are known; an image "
                         "file has no such outline to score against. For one image's maps use `attnlab capture "
                         f"--model {args.model} --image FILE` (patterns) or the app's Vision page (rollout, "
                         "gradient rollout)" if lm.reads_image else f"--image is for vision models; {args.model} "
                         "reads text")
    if args.ship:
        return _ship(lm, args.model)
    if lm.reads_image:
        return _run_images(lm, args)
    report = faithfulness(lm, n=args.n, seed=args.seed, ablation=not args.no_ablation, methods=methods)
    if args.json:
        print_json(report)
        return 0
    print(f"{report['model']} ({report['arch']}), {report['n_examples']} examples, seed {report['seed']}: "
          f"p(answer) {report['p_answer']:.3f}, accuracy {report['accuracy']:.3f}, "
          f"chance top-1 {report['chance']:.3f}")
    tasks = list(report["by_task"])
    print(f"  {'method':<21} {'top-1':>6} {'n':>5}" + "".join(f" {t[:11]:>11}" for t in tasks))
    for name, m in report["methods"].items():
        per = "".join(f" {report['by_task'][t][name]['top1']:>11.3f}" if name in report["by_task"][t]
                      else f" {'-':>11}" for t in tasks)
        print(f"  {name:<21} {m['top1']:>6.3f} {m['n']:>5}{per}")
    _print_ig(report)
    if report["ablation"]:
        print("heads with the largest effect when zeroed (Δp of the correct answer):")
        for r in top_heads(report, 5):
            print(f"  {r['site']:<32} head {r['head']:<3} {r['delta_p']:+.4f}")
    return 0


def parse_methods(text: str | None) -> tuple[str, ...]:
    """The methods of --methods (every one when None); UsageError, one line, for an unknown or empty list."""
    from attnlab.analysis.faithfulness.benchmark import METHODS
    from attnlab.cli.errors import UsageError

    if text is None:
        return METHODS
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise UsageError(f"--methods takes a comma-separated list of {', '.join(METHODS)}; "
                         + (f"unknown: {', '.join(unknown)}" if unknown else "got none"))
    return tuple(dict.fromkeys(names))


def _ship(lm, name: str) -> int:
    """--ship: the default report written beside a bundled text model's checkpoint."""
    from attnlab.analysis.faithfulness.store import ship, shipped_dir
    from attnlab.cli.errors import UsageError

    if shipped_dir(lm) is None or lm.reads_image:
        raise UsageError(f"--ship writes beside a bundled text model's checkpoint; {name} is not one (see "
                         "`attnlab models`)")
    path = ship(lm)
    print(f"{lm.name}: the default faithfulness report written to {path.name} beside its checkpoint")
    return 0


def _run_images(lm, args) -> int:
    """A ViT on shape images: pointing-game accuracy and mass inside the red and blue objects per method, against chance."""
    from attnlab.analysis.faithfulness.images import image_faithfulness

    report = image_faithfulness(lm, n=args.n, seed=args.seed)
    if args.json:
        print_json(report)
        return 0
    c = report["chance"]
    print(f"{report['model']} ({report['arch']}), {report['n_examples']} images, seed {report['seed']}: "
          f"accuracy {report['accuracy']:.3f}; chance pointing {c['pointing']:.3f}, mass {c['mass']:.3f}")
    print(f"  {'method':<21} {'pointing':>8} {'mass':>6}")
    for name, m in report["methods"].items():
        print(f"  {name:<21} {m['pointing']:>8.3f} {m['mass']:>6.3f}")
    _print_ig(report)
    print("heads whose [CLS] attention puts the most mass on the red and blue objects:")
    for h in report["heads"][:5]:
        print(f"  layer {h['layer']} head {h['head']}: {h['mass']:.3f}")
    return 0


def _print_ig(report: dict) -> None:
    ig = report.get("integrated_gradients")
    if ig:
        steps = [e["steps"] for e in ig["examples"]]
        rows = f" ({ig['mean_rows']:.1f} gradient rows an example)" if "mean_rows" in ig else ""
        print(f"integrated gradients: baseline {ig['baseline']}, {min(steps)}–{max(steps)} steps{rows}; completeness "
              f"off by {ig['mean_error']:.2%} on average, {ig['max_error']:.2%} at most (per example: --json)")
