"""`attnlab mixing`: context mixing — what each token takes from every other token through one layer, by the
attention norm (Kobayashi et al. 2020) or value zeroing (Mohebbi et al. 2023), beside the layer's attention weights.

    attnlab mixing --model M --text T | --image F [--method attention_norm|value_zeroing] [--layer L] [--query Q]
                   [--json]
    attnlab mixing --model M --src-text S --text T [--group encoder|decoder|cross] …   (an encoder–decoder)
"""

from __future__ import annotations

from attnlab.cli.commands.common import add_image_arg, load_model, model_inputs, print_json

HELP = ("context mixing of one layer: the attention norm ‖Σ_h α_h v_h W_O^h‖ or value zeroing (1 − cos of the "
        "block's output when a token's value is zeroed, rows summing to 1), one query's row beside the layer's "
        "head-mean attention; a converted decoder, encoder, vision transformer or encoder–decoder (its encoder's, "
        "decoder's or cross-attention's)")


def add_parser(sub) -> None:
    from attnlab.analysis.probes.context_mixing import METHODS
    from attnlab.analysis.probes.encdec_mixing import GROUPS

    p = sub.add_parser("mixing", help=HELP, description=HELP)
    p.add_argument("--model", required=True, help="a converted decoder, encoder, ViT or encoder–decoder: a model "
                                                   "name or a folder")
    p.add_argument("--text", default=None, help="input text (an encoder–decoder's target)")
    p.add_argument("--src-text", default=None, help="source text for an encoder–decoder")
    p.add_argument("--group", choices=GROUPS, default=None,
                   help="an encoder–decoder's attention: encoder (source → source), decoder (target → target) or "
                        "cross (target → source; the default)")
    add_image_arg(p)
    p.add_argument("--method", choices=METHODS, default="value_zeroing", help="default value_zeroing")
    p.add_argument("--layer", type=int, default=-1, help="the layer (0-based; negative counts from the end; default "
                                                         "the last)")
    p.add_argument("--query", type=int, default=-1, help="the query position (default the last; a ViT: 0, [CLS])")
    p.add_argument("--json", action="store_true", help="print JSON: tokens (the queries), keys, row, attention, "
                                                       "matrix [queries, keys]")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.analysis.probes.context_mixing import context_mixing, refusal
    from attnlab.model.inputs import InputError

    lm = load_model(args.model)
    if (why := refusal(lm)) is not None:
        raise InputError(why)
    if not lm.reads_image and args.text is None and not (lm.reads_source and args.src_text is not None):
        raise InputError(f"--text is required: {lm.name} reads text")
    if args.group is not None and not lm.reads_source:
        raise InputError(f"--group picks an encoder–decoder's attention; {lm.name} has one self-attention stack")
    inputs = model_inputs(lm, args)
    group = args.group or "cross"
    query = 0 if lm.reads_image and args.query == -1 else args.query  # a ViT: [CLS] by default
    queries, keys = _tokens(lm, inputs, group)
    side = {"encoder": "source", "decoder": "target", "cross": "target"}[group] if lm.reads_source else "text"
    layer = _index(args.layer, len(_stack(lm, group).blocks), "layer", "this model has layers")
    q = _index(query, len(queries), "query", f"the {side} has positions")  # both before the (costly) mixing
    mixing = context_mixing(lm, inputs, args.method)  # [L, T, T], or an encoder–decoder's EncDecMixing
    layers = mixing.group(group) if lm.reads_source else mixing  # [L, Q, K]
    name = f"{_site(lm, group, layer)}.hook_pattern"  # this layer's pattern alone, not every layer's
    pattern = lm.forward(inputs, names=[name], records=False).capture.tensor(name)  # [1, H, Q, K]
    attention = pattern[0, :, q].float().mean(0).cpu().numpy()  # [K]: the row's head-mean weights
    row = layers[layer, q]
    if args.json:
        print_json({"model": lm.name, "method": args.method, **({"group": group} if lm.reads_source else {}),
                    "layer": layer, "query": q, "tokens": queries, "keys": keys, "row": row.tolist(),
                    "attention": attention.tolist(), "matrix": layers[layer].tolist()})
        return 0
    K = len(keys)
    what = f"{group} attention's " if lm.reads_source else ""
    print(f"{lm.name}: {args.method} of {what}layer {layer}, query {q} {queries[q]!r} (top {min(10, K)} of {K} tokens)")
    print(f"  {'key':<24} {args.method:>15} {'attention':>10}")
    for k in sorted(range(K), key=lambda k: -row[k])[:10]:
        print(f"  {f'{k} {keys[k]!r}':<24} {row[k]:>15.4f} {attention[k]:>10.4f}")
    return 0


def _tokens(lm, inputs, group: str) -> tuple[list[str], list[str]]:
    """The query and key tokens of a matrix: one stack's tokens twice; an encoder–decoder's by `group`."""
    tgt, src = list(inputs.tokens), list(inputs.src_tokens or [])
    if not lm.reads_source:
        return tgt, tgt
    return {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}[group]


def _stack(lm, group: str):
    """The stack of blocks whose layers the matrices of `group` are: one stack's own; an encoder–decoder's encoder
    (group encoder) or decoder."""
    if not lm.reads_source:
        return lm.model
    return lm.model.encoder if group == "encoder" else lm.model.decoder


def _site(lm, group: str, layer: int) -> str:
    """The attention module whose pattern sits beside the matrix of `group` at `layer`."""
    block = _stack(lm, group).blocks[layer]
    return (block.cross_attn if lm.reads_source and group == "cross" else block.attn).site


def _index(i: int, n: int, what: str, has: str) -> int:
    """i (negative from the end) within 0..n − 1, or InputError in one line."""
    from attnlab.model.inputs import InputError

    if not -n <= i < n:
        raise InputError(f"{what} {i} is out of range: {has} 0–{n - 1}")
    return i % n
