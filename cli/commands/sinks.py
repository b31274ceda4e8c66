"""`attnlab sinks`: attention sinks — each layer's and head's share of attention on the first token over a set of
texts, the sink heads (share ≥ 0.3), the first token's key, value, output and residual norms against the others',
and the StreamingLLM window test (perplexity of a long text under a sliding window with and without the first 4
tokens kept, and with full attention).

    attnlab sinks --model M [--texts FILE] [--window W] [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import load_model, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("sinks", help="attention sinks: the share of attention on the first token per layer and head, "
                                     "the sink heads, norms, and the StreamingLLM window-perplexity test")
    p.add_argument("--model", required=True, help="a decoder or an encoder: a model name (see `attnlab models`) or a "
                                                  "folder")
    p.add_argument("--texts", default=None, metavar="FILE",
                   help="texts to average over: a JSON list of strings, or a text file with one text per line "
                        "(default: sample_texts/sinks.json and the model's presets)")
    p.add_argument("--window", type=int, default=None,
                   help="the window test's window W in tokens (default: 256, at most a quarter of the model's "
                        "context); 0 skips the test")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def read_texts(path: str) -> list[str]:
    """Texts from a JSON list of strings or a file of one text per line; one line (UsageError) when unusable."""
    import json

    from attnlab.cli.errors import UsageError

    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read(2_000_000)
    except FileNotFoundError:
        raise UsageError(f"--texts: no such file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--texts: cannot read {path} as UTF-8 text ({type(e).__name__})") from None
    if path.endswith(".json"):
        try:
            texts = json.loads(raw)
        except json.JSONDecodeError as e:
            raise UsageError(f"--texts: {path} is not valid JSON (line {e.lineno}: {e.msg})") from None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise UsageError(f"--texts: {path} must hold a JSON list of strings")
    else:
        texts = raw.splitlines()
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise UsageError(f"--texts: {path} holds no text")
    return texts


def run(args) -> int:
    from attnlab.analysis.machinery.window_ppl import window_test, window_test_lacks
    from attnlab.analysis.probes.sinks import measure_sinks
    from attnlab.cli.errors import UsageError

    if args.window is not None and args.window < 0:
        raise UsageError(f"--window must be ≥ 0 tokens (0 skips the window test), got {args.window}")
    texts = read_texts(args.texts) if args.texts else None
    lm = load_model(args.model)
    report = measure_sinks(lm, texts)
    lacks = window_test_lacks(lm)
    notes = [n for n in (report.note, lacks) if n]
    ppl = None
    if args.window == 0:
        notes.append("the window test was skipped (--window 0)")
    elif lacks is None:
        ppl = window_test(lm, args.window).to_json()
    out = report.to_json() | {"window_ppl": ppl, "note": "; ".join(notes) or None}
    if args.json:
        print_json(out)
        return 0
    print(f"{lm.name}: share of attention on the first token (rows 1..T−1), {report.n_texts} texts, "
          f"{report.tokens} tokens; a sink head puts ≥ {out['threshold']} there")
    for i, (s, r) in enumerate(zip(report.per_layer, report.sink_rate)):
        extra = ""
        if report.norms is not None:
            n = report.norms
            extra = (f"   ‖k‖ {n['key_first'][i]:.1f}/{n['key_rest'][i]:.1f}  ‖v‖ {n['value_first'][i]:.2f}/"
                     f"{n['value_rest'][i]:.2f}  ‖αv‖ {n['out_first'][i]:.2f}/{n['out_rest'][i]:.2f}  ‖x‖ "
                     f"{n['resid_first'][i]:.0f}/{n['resid_rest'][i]:.0f}")
        print(f"  layer {i:>2}  share {s:.3f}  sink heads {100 * r:5.1f} %{extra}")
    if report.norms is not None:
        print("  (norms: the first token / the mean of the others; ‖αv‖: its output against all others' together)")
    print("sink heads: " + (", ".join(f"{h['layer']}.{h['head']} ({h['share']:.2f})" for h in report.sink_heads)
                            or "none"))
    if ppl is not None:
        cache = ppl["with_sinks_cache_positions"]
        print(f"window test over {ppl['tokens']} tokens, window {ppl['window']}: perplexity full {ppl['full']:.2f}, "
              f"window + {ppl['sinks']} sinks {ppl['with_sinks']:.2f}"
              + (f" (at cache positions {cache:.2f})" if cache is not None else "")
              + f", window alone {ppl['without_sinks']:.2f}")
    for n in notes:
        print(f"note: {n}")
    return 0
