"""`attnlab mixing`: context mixing — what each token takes from every other token through one layer, by the
attention norm (Kobayashi et al. 2020) or value zeroing (Mohebbi et al. 2023), beside the layer's attention weights.

    attnlab mixing --model M --text T | --image F [--method attention_norm|value_zeroing] [--layer L] [--query Q]
                   [--json]
"""

from __future__ import annotations

from attnlab.cli.commands.common import add_image_arg, load_model, model_inputs, print_json

HELP = ("context mixing of one layer: the attention norm ‖Σ_h α_h v_h W_O^h‖ or value zeroing (1 − cos of the "
        "block's output when a token's value is zeroed, rows summing to 1), one query's row beside the layer's "
        "head-mean attention; a converted decoder, encoder or vision transformer")


def add_parser(sub) -> None:
    from attnlab.analysis.probes.context_mixing import METHODS

    p = sub.add_parser("mixing", help=HELP, description=HELP)
    p.add_argument("--model", required=True, help="a converted decoder, encoder or ViT: a model name or a folder")
    p.add_argument("--text", default=None, help="input text")
    add_image_arg(p)
    p.add_argument("--method", choices=METHODS, default="value_zeroing", help="default value_zeroing")
    p.add_argument("--layer", type=int, default=-1, help="the layer (0-based; negative counts from the end; default "
                                                         "the last)")
    p.add_argument("--query", type=int, default=-1, help="the query position (default the last; a ViT: 0, [CLS])")
    p.add_argument("--json", action="store_true", help="print JSON: tokens, row, attention, matrix [T, T]")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.probes.context_mixing import context_mixing, refusal
    from attnlab.model.inputs import InputError

    lm = load_model(args.model)
    if (why := refusal(lm)) is not None:
        raise InputError(why)
    if not lm.reads_image and args.text is None:
        raise InputError(f"--text is required: {lm.name} reads text")
    args.src_text = None  # one self-attention stack: no source text
    inputs = model_inputs(lm, args)
    query = 0 if lm.reads_image and args.query == -1 else args.query  # a ViT: [CLS] by default
    layers = context_mixing(lm, inputs, args.method)  # [L, T, T]
    L, T = layers.shape[:2]
    layer, q = _index(args.layer, L, "layer", "this model has layers"), _index(query, T, "query", "the text has positions")
    name = f"{lm.model.blocks[layer].attn.site}.hook_pattern"  # this layer's pattern alone, not every layer's
    pattern = lm.forward(inputs, names=[name], records=False).capture.tensor(name)  # [1, H, T, T]
    attention = pattern[0, :, q].float().mean(0).cpu().numpy()  # [T]: the row's head-mean weights
    row = layers[layer, q]
    if args.json:
        print_json({"model": lm.name, "method": args.method, "layer": layer, "query": q, "tokens": list(inputs.tokens),
                    "row": row.tolist(), "attention": attention.tolist(), "matrix": layers[layer].tolist()})
        return 0
    print(f"{lm.name}: {args.method} of layer {layer}, query {q} {inputs.tokens[q]!r} (top {min(10, T)} of {T} tokens)")
    print(f"  {'key':<24} {args.method:>15} {'attention':>10}")
    for k in sorted(range(T), key=lambda k: -row[k])[:10]:
        print(f"  {f'{k} {inputs.tokens[k]!r}':<24} {row[k]:>15.4f} {attention[k]:>10.4f}")
    return 0


def _index(i: int, n: int, what: str, has: str) -> int:
    """i (negative from the end) within 0..n − 1, or InputError in one line."""
    from attnlab.model.inputs import InputError

    if not -n <= i < n:
        raise InputError(f"{what} {i} is out of range: {has} 0–{n - 1}")
    return i % n
