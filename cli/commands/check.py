"""`attnlab check`: invariants, eager vs fused backends, cached vs uncached — as JSON."""

from __future__ import annotations

from attnlab.cli.commands.common import (
    add_device_args,
    add_image_arg,
    add_model_args,
    load_model,
    model_inputs,
    print_json,
)


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="check attention invariants and backend/cache consistency")
    add_model_args(p)
    add_device_args(p)
    add_image_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def skipped(c: dict) -> bool:
    """A check that does not apply to this model (no value, a "not applicable" note): SKIP, not PASS."""
    return c["value"] is None and c.get("note", "").startswith("not applicable")


def run(args) -> int:
    from attnlab.analysis.machinery.checks import run_checks

    lm = load_model(args.model, args)
    report = run_checks(lm, model_inputs(lm, args))
    if args.json:
        print_json(report)
    else:
        if "rules" in report:
            r = report["rules"]
            print(f"{report['dtype']} on {report['device']}: fused backends vs {r['reference']} within "
                  f"{r['backend']:g}" + (f" and ≤ {r['backend_vs_eager_factor']:g}× eager" if r["backend_vs_eager_factor"] else ""))
        for c in report["checks"]:
            value = "n/a" if c["value"] is None else f"{c['value']:.3g}"
            if skipped(c):
                print(f"SKIP  {c['name']:<28} {c['note']}")
                continue
            print(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']:<28} {value:>10}  (tol {c['tolerance']:.3g})")
    return 0 if report["passed"] else 1
