"""`attnlab circuit`: circuit discovery with edge attribution patching (EAP) or EAP-IG between a clean and a
corrupted prompt of equal token length — the top edges, each head's summed score, and the share of the logit
difference the circuit of the top edges keeps.

    attnlab circuit --model M --clean T --corrupt T2 --answer A --wrong B [--method eap|eap-ig|eap-ig-act] [--steps M] [--edges N] [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    from attnlab.analysis.circuit.scores import ACT_STEPS, IG_STEPS, MAX_STEPS, METHODS

    p = sub.add_parser("circuit", help="circuit discovery (EAP, EAP-IG): the edges that carry the clean–corrupted "
                                       "logit difference and the faithfulness of their circuit")
    p.add_argument("--model", required=True, help="a pre-norm decoder: a model name (see `attnlab models`) or a folder")
    p.add_argument("--clean", required=True, help="the clean prompt")
    p.add_argument("--corrupt", required=True, help="the corrupted prompt (the same number of tokens)")
    p.add_argument("--answer", required=True, help="the clean prompt's answer (one token)")
    p.add_argument("--wrong", required=True, help="the corrupted prompt's answer (one token)")
    p.add_argument("--method", choices=METHODS, default="eap-ig", help="EAP (one gradient, on the clean run), "
                   "EAP-IG (the gradient averaged over --steps points from the corrupted to the clean embeddings; "
                   "default) or eap-ig-act (EAP-IG over activations: each sender group on its own path from clean to "
                   "corrupted; its head scores estimate patching each head)")
    p.add_argument("--steps", type=int, default=None, help=f"points on each path (1–{MAX_STEPS}; default "
                   f"{IG_STEPS} for eap-ig, {ACT_STEPS} for eap-ig-act)")
    p.add_argument("--edges", type=int, default=None, help="the circuit's size: its top N edges by |score| "
                   "(default: 5 %% of the edges)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.circuit import find_circuit
    from attnlab.model.inputs import InputError

    if args.edges is not None and args.edges < 0:
        raise InputError(f"--edges must be 0 or more, got {args.edges}")
    try:
        from attnlab.analysis.circuit.scores import alphas
        alphas(args.method, args.steps)
    except ValueError as e:
        raise InputError(str(e)) from None
    lm = load_model(args.model)
    c = find_circuit(lm, args.clean, args.corrupt, args.answer, args.wrong, method=args.method, edges=args.edges,
                     steps=args.steps, curve=False)
    if args.json:
        out = c.to_json()
        print_json({k: out[k] for k in ("edges", "heads", "faithfulness", "n_edges_total", "n_edges", "method",
                                        "steps", "answer", "wrong", "m_clean", "m_corrupt", "seconds")})
        return 0
    per = " per group" if c.method == "eap-ig-act" else ""
    print(f"{lm.name}: logit({c.answer!r}) − logit({c.wrong!r}) clean {c.m_clean:+.3f}, corrupted {c.m_corrupt:+.3f}; "
          f"{c.method} ({c.steps} gradient{'s' if c.steps > 1 else ''}{per}) over {c.n_edges_total:,} edges in "
          f"{c.seconds['total']:.1f} s")
    print(f"the circuit of the top {c.n_edges} edges keeps {100 * c.faithfulness:.1f} % of the logit difference")
    for e in c.edges()[:15]:
        print(f"  {e['from']:<24} → {e['to']:<28} {e['score']:+9.4f}")
    heads = sorted(c.heads().items(), key=lambda kv: -abs(kv[1]))[:8]
    print("heads (summed score of the edges they send): " + ", ".join(f"{k.removeprefix('blocks.')} {v:+.3f}"
                                                                       for k, v in heads))
    return 0
