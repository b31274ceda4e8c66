"""`attnlab lens`: the logit lens — each layer's residual stream through the final norm and the unembedding —
and, with --answer, the direct logit attribution of that answer at the last position.

    attnlab lens --model M --text T [--answer TOKEN [--wrong TOKEN]] [--layer N] [--top K] [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("lens", help="logit lens: the top tokens each layer's residual stream predicts, the answer's "
                                    "probability per layer, and its direct logit attribution per head and MLP")
    p.add_argument("--model", required=True, help="a model name (see `attnlab models`) or a folder")
    p.add_argument("--text", required=True, help="input text (a target prefix for an encoder–decoder)")
    p.add_argument("--src-text", default=None, help="source text for an encoder–decoder")
    p.add_argument("--answer", default=None, help="one token: its probability per layer and its direct logit "
                                                  "attribution (pre-norm models with an unembedding)")
    p.add_argument("--wrong", default=None, help="with --answer: attribute the logit difference answer − wrong")
    p.add_argument("--layer", type=int, default=None, help="one row only: 0 = the embeddings, i = after layer i − 1 (n_layers: the output)")
    p.add_argument("--top", type=int, default=5, help="top tokens per (layer, position), 1–20 (default 5)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.probes.dla import direct_logit_attribution
    from attnlab.analysis.probes.lens import logit_lens
    from attnlab.model.inputs import InputError

    if not 1 <= args.top <= 20:
        raise InputError(f"--top must be between 1 and 20, got {args.top}")
    if args.wrong is not None and args.answer is None:
        raise InputError("--wrong needs --answer")
    lm = load_model(args.model)
    lens = logit_lens(lm, args.text, args.answer, src_text=args.src_text, k=args.top, layer=args.layer)
    dla = None
    if args.answer is not None and lm.is_causal and lm.cfg.norm == "pre":
        dla = direct_logit_attribution(lm, args.text, args.answer, args.wrong, src_text=args.src_text)
    if args.json:
        print_json({**lens.to_json(args.layer), **({"dla": dla.to_json()} if dla is not None else {})})
        return 0
    rows = range(len(lens.rows)) if args.layer is None else [args.layer]
    if args.layer is None:
        print(f"{lm.name}: the last position ({lens.tokens[-1]!r}) read after each layer")
        for r in rows:
            tops = "  ".join(f"{t!r} {p:.3f}" for t, p in zip(lens.top_tokens[r][-1], lens.top_probs[r, -1]))
            ans = (f"   p({lens.answer!r}) {lens.answer_probs[r, -1]:.4f} rank {lens.answer_ranks[r, -1]}"
                   if lens.answer_probs is not None else "")
            print(f"  {lens.rows[r]:>6}  {tops}{ans}")
    else:
        print(f"{lm.name}: row {lens.rows[args.layer]}, every position")
        for q, tok in enumerate(lens.tokens):
            tops = "  ".join(f"{t!r} {p:.3f}" for t, p in zip(lens.top_tokens[args.layer][q], lens.top_probs[args.layer, q]))
            print(f"  {q:>4} {tok!r:<14} {tops}")
    if dla is not None:
        what = f"logit({dla.answer!r})" + (f" − logit({dla.wrong!r})" if dla.wrong else "")
        print(f"direct logit attribution of {what} = {dla.logit:.4f} (parts sum to {dla.total:.4f}; final "
              f"{dla.norm} scale frozen at σ = {dla.scale:.4f})")
        order = sorted(((float(v), f"L{i} head {h}") for (i, h), v in _cells(dla.heads)), key=lambda x: -abs(x[0]))
        order += [(float(v), f"L{i} MLP") for i, v in enumerate(dla.mlps)]
        for v, name in sorted(order, key=lambda x: -abs(x[0]))[:8]:
            print(f"  {name:<14} {v:+.4f}")
        print(f"  {'embeddings':<14} {dla.embed:+.4f}   biases {dla.attn_bias + dla.norm_bias:+.4f}")
    return 0


def _cells(a):
    return [((i, h), a[i, h]) for i in range(a.shape[0]) for h in range(a.shape[1])]
