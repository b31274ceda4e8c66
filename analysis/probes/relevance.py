"""Gradient-weighted relevance (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability
for Interpreting Bi-Modal and Encoder-Decoder Transformers", ICCV).

For one output position q and one logit y (by default the predicted token), every self-attention
pattern A_l [H, T, T] is weighted by its gradient and the heads are averaged, keeping the positive part:
    Ā_l = mean_h relu(∂y/∂A_l ⊙ A_l)                                   (paper eq. 5)
Relevance starts as the identity (each token is relevant to itself) and is accumulated through the
self-attention layers from the first up:
    R = I;   R ← R + Ā_l · R   for l = 1 … L                             (paper eq. 6)
Row q of R scores every input token for the chosen logit. Rows are non-negative; with a causal
mask R is lower-triangular, so later tokens get exactly 0 relevance for an earlier output.

Encoder–decoder (paper §3.2, eqs. 7–11, restricted to a decoder that reads the encoder):
    R^ss = I [S, S], R^tt = I [T, T], R^ts = 0 [T, S]
    encoder self layer:  R^ss ← R^ss + Ā^ss · R^ss
    decoder self layer:  R^tt ← R^tt + Ā^tt · R^tt;   R^ts ← R^ts + Ā^tt · R^ts
    cross layer:         R^ts ← R^ts + Ā^ts · R̄^ss
with R̄^ss = rownorm(R^ss − I) + I (eq. 8). R^tt gets nothing from the cross layer (the source never
attends to the target, so eq. 11's R^st is 0). We leave out eq. 10's left factor (R̄^tt)ᵀ: the
decoder self rule above already carries target context into R^ts, and for a causal decoder that
transposed factor would move relevance from later target positions to earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.probes.embed_path import position_error
from attnlab.model.attention import Attention
from attnlab.model.inputs import InputError


@dataclass
class Relevance:
    """Relevance for one output position and logit.

    row      [T]   relevance of each input (target-side) token for the logit: matrix[position]
    matrix   [T, T] R over the (decoder's or encoder's) self-attention stack
    target_id      the token whose logit was explained; logit its value; position the query row
    Encoder–decoder only: source_row [S] = source_matrix[position], source_matrix R^ts [T, S],
    encoder_matrix R^ss [S, S].
    """

    row: np.ndarray
    matrix: np.ndarray
    target_id: int
    logit: float
    position: int
    source_row: np.ndarray | None = None
    source_matrix: np.ndarray | None = None
    encoder_matrix: np.ndarray | None = None


def attention_sites(model: torch.nn.Module) -> list[Attention]:
    """Attention modules in the order a forward pass runs them: encoder, then decoder self → cross per layer."""
    order = {"encoder": 0, "": 1, "decoder": 1}
    sites = [m for m in model.modules() if isinstance(m, Attention)]
    return sorted(sites, key=lambda m: (order.get(m.stack, 1), m.layer, m.cross))


def positive_grad_mean(pattern: torch.Tensor, grad: torch.Tensor) -> np.ndarray:
    """Ā = mean_h relu(∇A ⊙ A): [1, H, q, k] tensors -> [q, k] float64."""
    return (grad * pattern).clamp(min=0).mean(dim=(0, 1)).detach().double().cpu().numpy()


def _rownorm(m: np.ndarray) -> np.ndarray:
    s = m.sum(-1, keepdims=True)
    return np.divide(m, s, out=np.zeros_like(m), where=s > 0)


def gradient_relevance(lm, inputs, position: int = -1, target_id: int | None = None,
                       interventions=None) -> Relevance:
    """Chefer et al. 2021 relevance of every input token for the logit `target_id` at `position`.

    lm: a model.registry.LoadedModel with an LM or MLM head; inputs: from lm.encode(text).
    Decoder: the next-token logit at position t (the prediction of token t+1). ViT: the class logit read from
    [CLS] (position 0; `target_id` a class). Encoder (MLM): the
    logit at `position` (typically a [MASK]). Encoder–decoder: the decoder's next-token logit at
    target position t; `row` is the target-side relevance and `source_row` the source-side one.
    target_id None = the predicted (arg-max) token. Runs the eager backend with autograd enabled;
    `interventions` (model.hooks) apply to the run; a pattern replaced by a constant has no gradient
    and counts as Ā = 0 (write x·0 + value to keep ∇A).
    """
    sites = lm.attention_sites() if hasattr(lm, "attention_sites") else attention_sites(lm.model)  # a view: its own
    t = inputs.ids.shape[1]
    pos = position + t if position < 0 else position
    if not 0 <= pos < t:
        raise position_error(lm, position, t)
    was_training = lm.model.training
    lm.model.eval()
    try:
        out = lm.forward(inputs, names="*.hook_pattern", interventions=interventions, records=False, grad=True)
        cap = out.capture
        if out.logits is None:
            raise InputError(f"{lm.name} has no language-model head; gradient relevance needs logits")
        logits = out.logits[0, pos] if out.logits.dim() == 3 else out.logits[0]  # [V]; a ViT: [classes] on CLS
        tid = int(logits.argmax()) if target_id is None else int(target_id)
        if not 0 <= tid < logits.shape[-1]:
            raise InputError(f"target id {tid} is outside the vocabulary (0..{logits.shape[-1] - 1})")
        names = [f"{m.site}.hook_pattern" for m in sites]
        pats = [cap.tensors[n][0] for n in names]
        live = [i for i, p in enumerate(pats) if p.requires_grad] if logits.requires_grad else []
        grads = [None] * len(pats)  # a pattern replaced by a constant has no gradient: Ā = 0 there
        for i, g in zip(live, torch.autograd.grad(logits[tid], [pats[i] for i in live], allow_unused=True)
                        if live else ()):
            grads[i] = g
        logit = float(logits[tid].detach())
    finally:
        lm.model.train(was_training)
    cams = [np.zeros(tuple(p.shape[-2:])) if g is None else positive_grad_mean(p, g) for p, g in zip(pats, grads)]

    if not any(m.cross for m in sites):  # one self-attention stack
        r = np.eye(t)
        for cam in cams:
            r = r + cam @ r
        return Relevance(r[pos].copy(), r, tid, logit, pos)

    s = inputs.src_ids.shape[1]
    r_ss, r_tt, r_ts = np.eye(s), np.eye(t), np.zeros((t, s))
    for m, cam in zip(sites, cams):
        if m.stack == "encoder":
            r_ss = r_ss + cam @ r_ss
        elif m.cross:
            r_bar = _rownorm(r_ss - np.eye(s)) + np.eye(s)
            r_ts = r_ts + cam @ r_bar
        else:
            r_tt, r_ts = r_tt + cam @ r_tt, r_ts + cam @ r_ts
    return Relevance(r_tt[pos].copy(), r_tt, tid, logit, pos,
                     source_row=r_ts[pos].copy(), source_matrix=r_ts, encoder_matrix=r_ss)
