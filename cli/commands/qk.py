"""`attnlab qk`: QK attribution — why a head attends where it does. The pre-softmax score of one head at (query, key)
as a sum over pairs of residual-stream parts, query side × key side.

    attnlab qk --model M --text T --layer L --head H --query Q [--key K] [--top N] [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json

HELP = ("QK attribution: one head's pre-softmax score at (query, key) as a sum over pairs of residual-stream parts "
        "(embeddings, each earlier head, attention bias and MLP, the norm's β, the q/k biases), query side × key side. "
        "The layer's norm (and a QK-norm) is taken with its scale frozen at the actual residual of each position, as "
        "direct logit attribution freezes the final norm; a soft-capped score (Gemma 2) is split before the cap")


def add_parser(sub) -> None:
    p = sub.add_parser("qk", help=HELP, description=HELP)
    p.add_argument("--model", required=True, help="a converted decoder or encoder: a model name or a folder")
    p.add_argument("--text", required=True, help="input text")
    p.add_argument("--layer", type=int, required=True, help="the head's layer (0-based; negative counts from the end)")
    p.add_argument("--head", type=int, required=True, help="the query head (0-based)")
    p.add_argument("--query", type=int, required=True, help="the query position (0 = [BOS] when the model adds one; "
                                                            "negative counts from the end)")
    p.add_argument("--key", type=int, default=None, help="the key position (default: the key the query attends to most)")
    p.add_argument("--top", type=int, default=None, help="only the N largest terms (JSON adds 'rest', the others' "
                                                         "sum); default: all in JSON, 12 in the table")
    p.add_argument("--json", action="store_true", help="print JSON: score, terms (sorted by |value|), residual")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.probes.qk_attribution import FROZEN, check_model, qk_attribution
    from attnlab.model.inputs import InputError

    if args.top is not None and args.top < 1:
        raise InputError(f"--top must be ≥ 1, got {args.top}")
    lm = load_model(args.model)
    check_model(lm)
    a = qk_attribution(lm, lm.encode(args.text), args.layer, args.head, args.query, args.key)
    if args.json:
        print_json(a.to_json(args.top))
        return 0
    kv = f" (k/v head {a.kv_head})" if lm.cfg.kv_heads != lm.cfg.n_heads else ""
    print(f"{lm.name}: layer {a.layer}, head {a.head}{kv}, query {a.query} {a.tokens[a.query]!r} → key {a.key} "
          f"{a.tokens[a.key]!r}: weight {a.weight:.4f}{' (masked)' if a.masked else ''}")
    cap = f"; soft-capped: {a.capped_score:.4f}" if a.capped_score is not None else ""
    print(f"score {a.score:.4f} = Σ of {len(a.terms())} terms {a.total:.4f} (residual {a.residual:.1e}){cap}")
    print(f"  {'query side':<26} {'key side':<26} {'value':>9}")
    for t in a.terms(args.top or 12):
        print(f"  {t['query_side']:<26} {t['key_side']:<26} {t['value']:>+9.4f}")
    print(f"Frozen scale: {FROZEN} (here σ_query = {a.query_scale:.4f}, σ_key = {a.key_scale:.4f}, {a.norm}).")
    return 0
