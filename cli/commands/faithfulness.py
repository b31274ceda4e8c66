"""`attnlab faithfulness`: do attention, rollout, flow and relevance point at the answer's source?"""

from __future__ import annotations

from cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("faithfulness", help="faithfulness benchmark on the lecture tasks: top-1 source per method, "
                                            "and the answer-probability change when each head is zeroed")
    p.add_argument("--model", required=True, help="a model name (see `attnlab models`) or a folder")
    p.add_argument("--n", type=int, default=100, help="number of eval examples (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the example draw (default 0)")
    p.add_argument("--no-ablation", action="store_true", help="skip the head ablation")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from analysis.faithfulness import MAX_EXAMPLES, faithfulness, top_heads
    from model.inputs import InputError

    if not 1 <= args.n <= MAX_EXAMPLES:
        raise InputError(f"--n must be between 1 and {MAX_EXAMPLES}, got {args.n}")
    lm = load_model(args.model)
    report = faithfulness(lm, n=args.n, seed=args.seed, ablation=not args.no_ablation)
    if args.json:
        print_json(report)
        return 0
    print(f"{report['model']} ({report['arch']}), {report['n_examples']} examples, seed {report['seed']}: "
          f"p(answer) {report['p_answer']:.3f}, accuracy {report['accuracy']:.3f}, "
          f"chance top-1 {report['chance']:.3f}")
    tasks = list(report["by_task"])
    print(f"  {'method':<12} {'top-1':>6} {'n':>5}" + "".join(f" {t[:11]:>11}" for t in tasks))
    for name, m in report["methods"].items():
        per = "".join(f" {report['by_task'][t][name]['top1']:>11.3f}" if name in report["by_task"][t]
                      else f" {'-':>11}" for t in tasks)
        print(f"  {name:<12} {m['top1']:>6.3f} {m['n']:>5}{per}")
    if report["ablation"]:
        print("heads with the largest effect when zeroed (Δp of the correct answer):")
        for r in top_heads(report, 5):
            print(f"  {r['site']:<32} head {r['head']:<3} {r['delta_p']:+.4f}")
    return 0
