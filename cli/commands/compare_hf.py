"""`attnlab compare-hf`: our model against `transformers` on the same tokens (exit 1 past tolerance)."""

from __future__ import annotations

from attnlab.cli.commands.common import print_json
from attnlab.model.config import BACKENDS


def add_parser(sub) -> None:
    p = sub.add_parser("compare-hf", help="compare a Hugging Face checkpoint in our model against transformers")
    p.add_argument("--model", required=True, help="minilm, a Hugging Face folder, a hub id (online only), or smollm2 "
                   "or a .gguf file (compared with transformers' own GGUF loader)")
    p.add_argument("--text", default=None, help="input text (default: a short sentence)")
    p.add_argument("--pair", default=None, help="second sentence of a BERT pair (token types 1)")
    p.add_argument("--backend", choices=BACKENDS, default="eager",
                   help="our attention backend (transformers always runs eager)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.model.gguf.compare import compare_gguf, is_gguf
    from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS, compare_hf, within_tolerance
    from attnlab.model.parity_inputs import TOL_PIXELS, describe_difference

    if is_gguf(args.model):
        report = compare_gguf(args.model, args.text, backend=args.backend)
    else:
        report = compare_hf(args.model, args.text, pair=args.pair, backend=args.backend)
    ok = within_tolerance(report)
    if args.json:
        print_json(report)
    else:
        def fmt(v):
            return "n/a" if v is None else f"{v:.3g}"

        print(f"layers={report['n_layers']} heads={report['n_heads']} backend={args.backend}")
        if "tokens_equal" in report:
            print("tokens            " + ("equal (each side's own tokenizer)" if report["tokens_equal"]
                                          else describe_difference(report)))
        if report.get("max_abs_pixels") is not None:
            print(f"max |Δ pixels|    {fmt(report['max_abs_pixels']):>10}  (tol {TOL_PIXELS}; ours vs the "
                  "checkpoint's image processor)")
        elif report.get("pixels_note"):
            print(f"pixels            not compared ({report['pixels_note']})")
        print(f"max |Δ logits|    {fmt(report['max_abs_logits']):>10}  (tol {TOL_LOGITS})")
        print(f"max |Δ hidden|    {fmt(report['max_abs_hidden']):>10}  (tol {TOL_HIDDEN})")
        print(f"max |Δ attention| {fmt(report['max_abs_attention']):>10}  (tol {TOL_ATTENTION})")
        if report.get("max_abs_router_logits") is not None:
            print(f"max |Δ router logits| {fmt(report['max_abs_router_logits']):>6}  (tol {TOL_LOGITS})")
        print(f"greedy equal      {'n/a' if report['greedy_equal'] is None else report['greedy_equal']}")
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1
