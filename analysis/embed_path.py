"""Forward and backward runs over a model's input embeddings on the straight path b + α(e − b) from a
baseline b to the input e: the embedding hooks, the baseline, and the batched passes that gradient
attributions (analysis/attributions.py) are built from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.pass_size import give_back, rows_per_pass
from attnlab.model.inputs import InputError


# -- the input embeddings ---------------------------------------------------------------------------------
def embed_modules(lm) -> dict[str, torch.nn.Module]:
    """{hook name: the embedding module whose `hook_embed` point that is}: one per stack that reads tokens."""
    m = lm.model
    if lm.arch == "encdec":
        return {"encoder.hook_embed": m.encoder.embed, "decoder.hook_embed": m.decoder.embed}
    return {"hook_embed": m.embed}


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
        raise InputError(f"position {position} is outside the {t} input tokens")
    return pos


def logit_at(lm, logits: torch.Tensor | None, pos: int) -> torch.Tensor:
    """[R, V] logits at the output position (a ViT: [R, classes] read from [CLS])."""
    if logits is None:
        raise InputError(f"{lm.name} has no prediction head; a gradient attribution needs a logit to explain")
    return logits if lm.reads_image else logits[:, pos]


def baseline_ids(lm, inputs) -> dict[str, torch.Tensor | None]:
    """Per hook, the token ids of the baseline [1, T]: every token that is not special (BOS, EOS, PAD, MASK)
    replaced by [PAD]; None = the zero embedding (a ViT's patches, or a tokenizer without [PAD])."""
    def base(ids, tok):
        if tok is None or tok.pad_id is None:
            return None
        special = [i for i in (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) if i is not None]
        return torch.where(torch.isin(ids, torch.tensor(special)), ids, torch.full_like(ids, tok.pad_id))

    if lm.reads_image:
        return {"hook_embed": None}
    if lm.arch == "encdec":
        return {"encoder.hook_embed": base(inputs.src_ids[:1], lm.src_tokenizer or lm.tokenizer),
                "decoder.hook_embed": base(inputs.ids[:1], lm.tokenizer)}
    return {"hook_embed": base(inputs.ids[:1], lm.tokenizer)}


def baseline_name(lm, inputs) -> str:
    """The baseline in words, as shown beside integrated gradients."""
    if lm.reads_image:
        return "every patch's embedding zero"
    ids = baseline_ids(lm, inputs)
    return ("every token's embedding zero" if all(v is None for v in ids.values())
            else "every non-special token replaced by [PAD]")


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
    base_ids, mods = baseline_ids(lm, inputs), embed_modules(lm)
    embeds, bases, leaves = {}, {}, {}

    def path(x: torch.Tensor, name: str) -> torch.Tensor:
        e = x.detach()[:1]  # [1, ...]: every row of the expanded batch holds the same embedding
        ids, emb = base_ids[name], mods[name]
        if lm.reads_image:
            b = torch.cat([e[:, :1], torch.zeros_like(e[:, 1:])], dim=1)  # [CLS] kept, every patch zero
        elif ids is None:
            b = torch.zeros_like(e)
        else:  # the [PAD] rows, scaled as hook_embed is (Gemma's √d_model)
            b = (emb.tok.weight[ids.to(e.device)] * getattr(emb, "scale", 1.0)).detach().to(e.dtype)
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
        tid = int(logits[-1].argmax()) if target_id is None else int(target_id)
        if not 0 <= tid < logits.shape[-1]:
            raise InputError(f"target id {tid} is outside 0..{logits.shape[-1] - 1}")
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
    if lm.arch == "encdec":
        return as_np["decoder.hook_embed"], as_np["encoder.hook_embed"]
    return as_np["hook_embed"], None
