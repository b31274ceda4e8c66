"""Forward and backward runs over a model's input embeddings on the straight path b + α(e − b) from a
baseline b (analysis/probes/ig_baseline.py) to the input e: the embedding hooks and the batched passes that gradient
attributions (analysis/probes/attributions.py) are built from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.probes.ig_baseline import baseline_embedding, baseline_ids
from attnlab.analysis.probes.pass_size import give_back, rows_per_pass
from attnlab.model.inputs import InputError


# -- the input embeddings ---------------------------------------------------------------------------------
def has_embed_hook(lm) -> bool:
    """True when the model has `hook_embed` points (our own modules; not a Hugging Face model read as it is)."""
    names = getattr(lm.model, "hook_names", None)
    return callable(names) and any(n.endswith("hook_embed") for n in names())


def per_token(x: torch.Tensor) -> torch.Tensor:
    """Σ over the embedding dimension: [B, T, D] -> [B, T]."""
    return x.sum(-1)


# -- forward (and backward) over embeddings on the path b + α(e − b) ------------------------------------
@dataclass
class EmbedPath:
    embeds: dict[str, torch.Tensor]  # name -> e [1, ...] (the input embedding)
    bases: dict[str, torch.Tensor]  # name -> b [1, ...] (the baseline embedding)
    grads: dict[str, torch.Tensor] | None  # name -> Σ_r w_r ∂y_r/∂z_r [1, ...], z_r = b + α_r (e − b); None without grad
    y: torch.Tensor  # [R] the logit at each α
    target_id: int
    position: int


def check_position(lm, inputs, position: int) -> int:
    if lm.reads_image:
        return 0
    t = inputs.ids.shape[1]
    pos = position + t if position < 0 else position
    if not 0 <= pos < t:
        raise position_error(lm, position, t)
    return pos


def position_error(lm, position: int, t: int) -> InputError:
    """One line for a `position` outside the t tokens it counts: an encoder–decoder's position counts the target
    (the logit read is the decoder's), not the source."""
    if getattr(lm, "reads_source", False):
        return InputError(f"position {position} is outside the {t} target tokens (an encoder–decoder's position "
                          "counts the target, not the source)")
    return InputError(f"position {position} is outside the {t} input tokens")


def check_target(tid: int, n: int) -> int:
    """`tid` when it is one of the n logits' ids, else one line."""
    if not 0 <= tid < n:
        raise InputError(f"target id {tid} is outside 0..{n - 1}")
    return tid


def logit_at(lm, logits: torch.Tensor | None, pos: int) -> torch.Tensor:
    """[R, V] logits at the output position (a ViT: [R, classes] read from [CLS])."""
    if logits is None:
        raise InputError(f"{lm.name} has no prediction head; a gradient attribution needs a logit to explain")
    return logits if lm.reads_image else logits[:, pos]


def along_path(lm, inputs, position: int, target_id: int | None, alphas: torch.Tensor, interventions=None,
          grad: bool = True, weights: torch.Tensor | None = None) -> EmbedPath:
    """y at embeddings b + α_r (e − b), and (grad) the gradients weighted by `weights` [R] (default all 1) and
    summed over r. Rows are independent, so they run in passes of at most pass_size.rows_per_pass rows, the
    pass holding the last α first (target_id None = the arg-max there)."""
    pos = check_position(lm, inputs, position)
    if not has_embed_hook(lm):
        raise InputError(f"{lm.name} has no hook_embed point: input × gradient and integrated gradients need a "
                         "converted model")
    weights = torch.ones(len(alphas), dtype=torch.float64) if weights is None else weights
    n = rows_per_pass(lm, inputs.ids.shape[1], grad)
    starts = list(range(0, len(alphas), n))[::-1]  # last pass first
    ys, grads = {}, None
    for s in starts:
        p = _pass(lm, inputs, pos, target_id, alphas[s:s + n], interventions, grad, weights[s:s + n])
        give_back()
        target_id, ys[s] = p.target_id, p.y
        if grad:
            grads = p.grads if grads is None else {k: grads[k] + g for k, g in p.grads.items()}
    return EmbedPath(p.embeds, p.bases, grads, torch.cat([ys[s] for s in sorted(ys)]), target_id, pos)


def _pass(lm, inputs, pos: int, target_id: int | None, alphas: torch.Tensor, interventions, grad: bool,
          weights: torch.Tensor) -> EmbedPath:
    """One forward (and backward) over the α's of one pass."""
    base_ids, mods = baseline_ids(lm, inputs), lm.embed_modules()
    embeds, bases, leaves = {}, {}, {}

    def path(x: torch.Tensor, name: str) -> torch.Tensor:
        e = x.detach()[:1]  # [1, ...]: every row of the expanded batch holds the same embedding
        b = baseline_embedding(lm, e, base_ids[name], mods[name])
        embeds[name], bases[name] = e, b
        a = alphas.to(e.device, e.dtype).view(-1, *([1] * (x.dim() - 1)))  # [R, 1, ...]
        leaves[name] = (b + a * (e - b)).requires_grad_(grad)  # [R, ...]
        return leaves[name]

    was_training = lm.model.training
    lm.model.eval()
    try:
        out = lm.forward(inputs.expand(len(alphas)), interventions={**(interventions or {}),
                         **{name: path for name in mods}}, records=False, grad=grad)
        logits = logit_at(lm, out.logits, pos)  # [R, V]
        tid = check_target(int(logits[-1].argmax()) if target_id is None else int(target_id), logits.shape[-1])
        y = logits[:, tid]  # [R]
        grads = None
        if grad:
            names = list(leaves)
            got = torch.autograd.grad(y.sum(), [leaves[n] for n in names], allow_unused=True)
            grads = {n: _weighted(leaves[n], g, weights) for n, g in zip(names, got)}
    finally:
        lm.model.train(was_training)
    return EmbedPath(embeds, bases, grads, y.detach().clone(), tid, pos)  # a view would keep the [R, T, V] logits


def _weighted(leaf: torch.Tensor, g: torch.Tensor | None, weights: torch.Tensor) -> torch.Tensor:
    """Σ_r w_r g_r in float64: [R, ...] -> [1, ...] (zeros where the leaf got no gradient)."""
    if g is None:
        return torch.zeros_like(leaf[:1], dtype=torch.float64)
    w = weights.to(g.device, torch.float64).view(-1, *([1] * (g.dim() - 1)))  # [R, 1, ...]
    return (w * g.double()).sum(0, keepdim=True)


def token_rows(lm, per: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray | None]:
    """(target-side row, source row or None) from per-hook [T] scores."""
    as_np = {n: v.detach().double().cpu().numpy() for n, v in per.items()}
    if lm.reads_source:
        return as_np["decoder.hook_embed"], as_np["encoder.hook_embed"]
    return as_np["hook_embed"], None


# -- many inputs' paths in shared passes ------------------------------------------------------------------
@dataclass
class PathJob:
    """One input's rows: the logit `target_id` at `position` at embeddings b + α_r (e − b)."""

    inputs: object  # model.inputs.Inputs of one text [1, T]
    position: int
    target_id: int
    alphas: torch.Tensor  # [R] float64


@dataclass
class PathRows:
    """One PathJob's rows: y [R] the logit at each α, and (with a gradient) per hook the terms [R, T] =
    Σ_d (e − b)_{td} · ∂y_r/∂z_{r,td} (z_r = b + α_r (e − b)): row r's summand of integrated gradients, whose
    sum over t is dy/dα at α_r."""

    y: torch.Tensor  # [R] float64
    terms: dict[str, torch.Tensor] | None  # name -> [R, T] float64; None without a gradient
    target_id: int
    position: int


def _shape_key(lm, inputs) -> tuple:
    """Jobs that may share a pass: a causal decoder's any (padded on the right, which no earlier position sees),
    any other model's only at the same lengths."""
    if _causal(lm, inputs):
        return ()
    src = None if inputs.src_ids is None else inputs.src_ids.shape[1]
    return inputs.ids.shape[1], src, None if inputs.pixels is None else tuple(inputs.pixels.shape)


def _causal(lm, inputs) -> bool:
    """True when no position sees a later one: a decoder without token types or a padding mask."""
    return lm.predicts_next_token and inputs.type_ids is None and inputs.attention_mask is None


def along_paths(lm, jobs: list[PathJob], grad: bool = True, interventions=None) -> list[PathRows]:
    """Many inputs' rows at once, packed into passes of at most rows_per_pass rows: each job's y [R] and (grad) its
    terms [R, T] (PathRows). Without interventions (which may hold tensors of the whole input) a causal decoder
    reads each input only up to its position (the logit there sees no later token; their terms are 0); it pads on
    the right to the pass's longest."""
    if jobs and not has_embed_hook(lm):
        raise InputError(f"{lm.name} has no hook_embed point: integrated gradients needs a converted model")
    pos = [check_position(lm, j.inputs, j.position) for j in jobs]
    used = [p + 1 if _causal(lm, j.inputs) and not interventions else j.inputs.ids.shape[1] for p, j in zip(pos, jobs)]
    short = [j.inputs.span(0, n) if n < j.inputs.ids.shape[1] else j.inputs for j, n in zip(jobs, used)]
    rows = sorted((_shape_key(lm, j.inputs), used[i], i, r) for i, j in enumerate(jobs) for r in range(len(j.alphas)))
    out = [PathRows(torch.zeros(len(j.alphas), dtype=torch.float64), {} if grad else None, j.target_id, pos[i])
           for i, j in enumerate(jobs)]
    start = 0
    while start < len(rows):
        key, stop = rows[start][0], start + 1
        while stop < len(rows) and rows[stop][0] == key and stop - start < rows_per_pass(lm, rows[stop][1], grad):
            stop += 1  # rows sorted by length: the last row added is the longest, and sets the pass's size
        _shared_pass(lm, jobs, short, pos, [(i, r) for *_, i, r in rows[start:stop]], grad, interventions, out)
        give_back()
        start = stop
    return out


def _shared_pass(lm, jobs, short, pos, rows, grad, interventions, out) -> None:
    """One forward (and backward) over `rows` [(job, row)] of the (shortened) inputs; fills out[job].y and terms."""
    t = max(short[i].ids.shape[1] for i, _ in rows)
    first = short[rows[0][0]]
    ids = torch.zeros(len(rows), t, dtype=torch.long)  # [R, T]: each row its input, padded on the right
    for k, (i, _) in enumerate(rows):
        ids[k, :short[i].ids.shape[1]] = short[i].ids[0]

    def own(field: str, default=torch.zeros_like):  # [R, ...]: each row its own input's (one shape: _shape_key)
        xs = [getattr(short[i], field) for i, _ in rows]
        like = next((x for x in xs if x is not None), None)  # a row without one reads the model's default
        return None if like is None else torch.cat([default(like) if x is None else x for x in xs])

    batch = type(first)(ids, [], own("src_ids"), first.src_tokens, own("type_ids"), own("src_mask", torch.ones_like),
                        own("attention_mask", torch.ones_like), own("pixels"))
    alphas = torch.tensor([float(jobs[i].alphas[r]) for i, r in rows], dtype=torch.float64)
    mods, leaves, diffs = lm.embed_modules(), {}, {}
    owners = {i: [k for k, (j, _) in enumerate(rows) if j == i] for i in dict.fromkeys(i for i, _ in rows)}

    def length(i: int, name: str, x: torch.Tensor) -> int:  # the tokens of job i at hook `name`
        return x.shape[1] if name == "encoder.hook_embed" or lm.reads_image else short[i].ids.shape[1]

    def path(x: torch.Tensor, name: str) -> torch.Tensor:
        e = x.detach()  # [R, T, ...]: each row its own input's embedding
        b = e.clone()  # padding keeps its embedding on every row
        for i, ks in owners.items():
            n = length(i, name, e)
            one = e[ks[0]:ks[0] + 1, :n]  # [1, n, ...]
            b[ks, :n] = baseline_embedding(lm, one, baseline_ids(lm, short[i])[name], mods[name])
        diffs[name] = e - b  # [R, T, ...]: 0 on padding
        a = alphas.to(e.device, e.dtype).view(-1, *([1] * (x.dim() - 1)))  # [R, 1, ...]
        leaves[name] = (b + a * diffs[name]).requires_grad_(grad)
        return leaves[name]

    was_training = lm.model.training
    lm.model.eval()
    try:
        fwd = lm.forward(batch, interventions={**(interventions or {}), **{name: path for name in mods}},
                         records=False, grad=grad)
        logits = fwd.logits if lm.reads_image else fwd.logits[torch.arange(len(rows)), [pos[i] for i, _ in rows]]
        y = logits[torch.arange(len(rows)), [check_target(jobs[i].target_id, logits.shape[-1]) for i, _ in rows]]  # [R]
        got = torch.autograd.grad(y.sum(), list(leaves.values()), allow_unused=True) if grad else ()
        y = y.detach().double().cpu()
    finally:
        lm.model.train(was_training)
    for k, (i, r) in enumerate(rows):
        out[i].y[r] = y[k]
    for name, g in zip(leaves, got):
        terms = per_token(diffs[name].double() * (0 if g is None else g.double())).cpu()  # [R, T, D] -> [R, T]
        for i, ks in owners.items():
            full = jobs[i].inputs.src_ids if name == "encoder.hook_embed" else jobs[i].inputs.ids
            n, whole = length(i, name, terms), full.shape[1] if not lm.reads_image else terms.shape[1]
            if name not in out[i].terms:
                out[i].terms[name] = torch.zeros(len(jobs[i].alphas), whole, dtype=torch.float64)
            out[i].terms[name][[r for _, r in (rows[k] for k in ks)], :n] = terms[ks, :n]
