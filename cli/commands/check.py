"""`attnlab check`: invariants, eager vs fused backends, cached vs uncached — as JSON."""

from __future__ import annotations

from cli.commands.common import (
    add_device_args,
    add_model_args,
    load_model,
    print_json,
    resolve_texts,
    sample_image,
)


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="check attention invariants and backend/cache consistency")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from analysis.checks import run_checks

    lm = load_model(args.model, args)
    if lm.reads_image:  # a ViT reads a generated shape image (--text does not apply)
        report = run_checks(lm, lm.encode_image(sample_image()))
    else:
        text, src = resolve_texts(lm, args.text, args.src_text)
        report = run_checks(lm, lm.encode(text, src))
    if args.json:
        print_json(report)
    else:
        if "rules" in report:
            r = report["rules"]
            print(f"{report['dtype']} on {report['device']}: fused backends vs {r['reference']} within "
                  f"{r['backend']:g}" + (f" and ≤ {r['backend_vs_eager_factor']:g}× eager" if r["backend_vs_eager_factor"] else ""))
        for c in report["checks"]:
            value = "n/a" if c["value"] is None else f"{c['value']:.3g}"
            print(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']:<28} {value:>10}  (tol {c['tolerance']:.3g})")
    return 0 if report["passed"] else 1
