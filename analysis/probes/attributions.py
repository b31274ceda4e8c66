"""Gradient attributions of one logit to the input tokens: input × gradient, integrated gradients and
attention × gradient.

y is the logit of `target_id` at output position q (a ViT: the class logit read from [CLS]). e_i [D] is the
input embedding of token i: its token embedding before positions and token types are added (a ViT: [CLS] and
each patch's projection, before positions) — the value of the model's `hook_embed` point.

  input_x_gradient      a_i = Σ_d e_id · ∂y/∂e_id                           (Shrikumar et al. 2016)
  integrated_gradients  a_i = Σ_d (e_id − b_id) · ∫₀¹ ∂y/∂e_id (b + α(e − b)) dα   (Sundararajan et al. 2017)
      baseline b: every token that is not special (BOS, EOS, PAD, MASK, [CLS] …) replaced by one token, positions
      kept: the tokenizer's [PAD], else its UNK, else its EOS (Llama-3's <|end_of_text|>, Mistral's <unk>: what
      transformers users set as pad; ig_baseline.baseline_token); the zero embedding only where the tokenizer has
      none of these; a ViT: patches zero, [CLS] (DeiT: and DIST) kept. The integral is composite Simpson on panels
      that check themselves against y and are bisected where they miss (analysis/probes/ig_rule.py): 8 steps
      (nodes besides α = 0) to start, at most 512, until the panels' errors sum to at most 1 % of |y(e) − y(b)|; a
      text's zero embedding starts from panels graded toward α = 0 as well (a zero stream under RMSNorm with RoPE
      meets the norms' 1/√ε gain there); each node's row is one forward and one backward, run once (a bisected
      panel keeps its nodes), the rows of many inputs shared in passes (integrated_gradients_many). Completeness: Σ_i a_i = y(e) − y(b) up to the
      quadrature error; `completeness_error` = |Σ_i a_i − (y(e) − y(b))| / |y(e) − y(b)|.
  attention_x_gradient  a_k = Σ_sites Σ_h Σ_i A_h[i, k] · ∂y/∂A_h[i, k]
      every attention edge i → k of every site (self- and cross-attention, every layer and head) weighted by
      the gradient of y with respect to its weight and credited to its key token k: the first-order (Taylor)
      estimate of how much y falls when every edge into k is cut. Signed; no head mean, no positive part and
      no rollout (Chefer et al.'s Ā in analysis/probes/relevance.py is mean_h relu(∇A ⊙ A), rolled out).
Encoder–decoder: `row` scores the target tokens and `source_row` the source tokens (both embeddings move
together along the IG path; encoder self-attention and cross-attention edges credit source keys). A ViT's
[CLS] (and DeiT's distillation token) is kept in the baseline, so its IG is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.probes.embed_path import (
    PathJob,
    along_path,
    along_paths,
    check_position,
    check_target,
    logit_at,
    per_token,
    token_rows,
)
from attnlab.analysis.probes.ig_baseline import baseline_name, zero_baseline
from attnlab.analysis.probes.ig_rule import FIRST_PANELS, MAX_REFINES, MAX_STEPS, PER_PANEL, Rule
from attnlab.analysis.probes.pass_size import max_tokens
from attnlab.analysis.probes.relevance import attention_sites
from attnlab.model.inputs import InputError

IG_STAGES = 1 + MAX_REFINES  # integrated_gradients_many's shared passes, at most


@dataclass
class Attribution:
    """One method's scores for one logit. row [T] over the (target-side) tokens, source_row [S] (encoder–
    decoder), target_id and logit y(e) at `position`. Integrated gradients also: steps, baseline_logit y(b),
    completeness_error (module docstring) and rows (the gradient rows it ran)."""

    row: np.ndarray
    target_id: int
    logit: float
    position: int
    source_row: np.ndarray | None = None
    steps: int | None = None
    baseline_logit: float | None = None
    completeness_error: float | None = None
    baseline: str | None = None
    rows: int | None = None

    @property
    def total(self) -> float:
        """Σ of every token's attribution (target and source side)."""
        return float(self.row.sum() + (0.0 if self.source_row is None else self.source_row.sum()))


def input_x_gradient(lm, inputs, position: int = -1, target_id: int | None = None,
                     interventions=None) -> Attribution:
    """Σ_d e_id · ∂y/∂e_id per token (module docstring). target_id None = the predicted token or class."""
    p = along_path(lm, inputs, position, target_id, torch.ones(1, dtype=torch.float64), interventions)
    per = {n: per_token(p.embeds[n].double() * p.grads[n])[0] for n in p.embeds}  # [T] per hook
    target, source = token_rows(lm, per)
    return Attribution(target, p.target_id, float(p.y[0]), p.position, source)


# -- integrated gradients ---------------------------------------------------------------------------------
def integrated_gradients(lm, inputs, position: int = -1, target_id: int | None = None, steps: int | None = None,
                         interventions=None) -> Attribution:
    """Integrated gradients from the baseline (module docstring), with y(e), y(b) and completeness. steps None:
    the adaptive rule (analysis/probes/ig_rule.py); else `steps` nodes on even panels."""
    return integrated_gradients_many(lm, [(inputs, position, target_id)], steps, interventions=interventions)[0]


def _check_steps(steps: int | None) -> None:
    if steps is not None and (not PER_PANEL <= steps <= MAX_STEPS or steps % PER_PANEL):
        raise InputError(f"integrated gradients takes a multiple of {PER_PANEL} steps from {PER_PANEL} to "
                         f"{MAX_STEPS}, not {steps}")


def integrated_gradients_many(lm, jobs: list[tuple], steps: int | None = None, interventions=None,
                              on_stage: Callable[[], None] | None = None) -> list[Attribution]:
    """integrated_gradients for many (inputs, position, target_id): each input its own rule (ig_rule.Rule), every
    input's new nodes of a round in shared passes (embed_path.along_paths), so the numbers are one call each's (to
    float rounding). A target_id None is the predicted token. `on_stage()`: called after each shared pass (at most
    IG_STAGES: the first nodes, then one per round of bisections)."""
    tick = on_stage or (lambda: None)
    _check_steps(steps)
    jobs = [(inp, check_position(lm, inp, p), t) for inp, p, t in jobs]
    one = torch.ones(1, dtype=torch.float64)
    tids = [t if t is not None else along_path(lm, inp, p, None, one, interventions, grad=False).target_id
            for inp, p, t in jobs]
    graded = steps is None and zero_baseline(lm)  # panels graded toward α = 0 (ig_rule)
    rules = [Rule(steps // PER_PANEL if steps else FIRST_PANELS, graded) for _ in jobs]
    left = list(range(len(jobs)))
    for stage in range(IG_STAGES):
        wanted = {i: rules[i].wanted() for i in left}
        got = along_paths(lm, [PathJob(jobs[i][0], jobs[i][1], tids[i], torch.tensor(wanted[i])) for i in left],
                          interventions=interventions)
        for i, p in zip(left, got):
            rules[i].add(wanted[i], p.y.numpy(), {n: t.numpy() for n, t in p.terms.items()})
        tick()
        last = steps is not None or stage == IG_STAGES - 1
        left = [i for i in left if not last and rules[i].refine()]
        if not left:
            break
    return [_ig_result(lm, inp, pos, tid, rule) for (inp, pos, _), tid, rule in zip(jobs, tids, rules)]


def _ig_result(lm, inputs, pos: int, tid: int, rule: Rule) -> Attribution:
    """The Attribution of one input's finished rule."""
    target, source = token_rows(lm, {n: torch.from_numpy(v) for n, v in rule.integral().items()})
    y_x, y_b = rule.y[1.0], rule.y[0.0]
    ig = Attribution(target, tid, y_x, pos, source, steps=rule.steps, baseline_logit=y_b,
                     baseline=baseline_name(lm), rows=rule.rows)
    ig.completeness_error = abs(ig.total - (y_x - y_b)) / max(abs(y_x - y_b), 1e-12)
    return ig


def ig_passes() -> int:
    """Forward passes' worth of one integrated_gradients call at most: the target's forward, then the rule's
    MAX_STEPS + 1 rows with a backward (≈ 3 forwards each)."""
    return 1 + 3 * (MAX_STEPS + 1)


def ig_refusal(lm, t: int) -> str | None:
    """One line when `t` tokens are more than integrated gradients takes on this model (pass_size), else None."""
    n = max_tokens(lm, ig_passes())
    if t <= n:
        return None
    return (f"not run on this text: up to {ig_passes():,} forward passes over {lm.name} (up to {MAX_STEPS} "
            f"gradient steps) cost more than about a minute of one CPU core beyond T = {n} tokens on "
            f"this model; this text has {t}.")


# -- attention × gradient --------------------------------------------------------------------------------
def attention_x_gradient(lm, inputs, position: int = -1, target_id: int | None = None,
                         interventions=None) -> Attribution:
    """Σ over sites, heads and query rows of A ⊙ ∂y/∂A, per key token (module docstring)."""
    pos = check_position(lm, inputs, position)
    sites = attention_sites(lm.model)
    was_training = lm.model.training
    lm.model.eval()
    try:
        out = lm.forward(inputs, names="*.hook_pattern", interventions=interventions, records=False, grad=True)
        logits = logit_at(lm, out.logits, pos)[0]  # [V]
        tid = check_target(int(logits.argmax()) if target_id is None else int(target_id), logits.shape[-1])
        pats = [out.capture.tensors[f"{m.site}.hook_pattern"][0] for m in sites]  # each [1, H, q, k]
        live = [i for i, a in enumerate(pats) if a.requires_grad]
        got = torch.autograd.grad(logits[tid], [pats[i] for i in live], allow_unused=True) if live else ()
        logit = float(logits[tid].detach())
    finally:
        lm.model.train(was_training)
    grads = dict(zip(live, got))
    t = inputs.ids.shape[1]
    row = np.zeros(t)
    source = np.zeros(inputs.src_ids.shape[1]) if lm.reads_source else None
    for i, (m, a) in enumerate(zip(sites, pats)):
        g = grads.get(i)
        if g is None:  # a pattern replaced by a constant has no gradient
            continue
        per_key = (a * g).sum(dim=(0, 1, 2)).detach().double().cpu().numpy()  # [1, H, q, k] -> [k]
        if m.cross or m.stack == "encoder" and lm.reads_source:
            source += per_key
        else:
            row += per_key
    return Attribution(row, tid, logit, pos, source)


METHODS = {"input_x_gradient": input_x_gradient, "integrated_gradients": integrated_gradients,
           "attention_x_gradient": attention_x_gradient}


def attribute(lm, inputs, method: str, position: int = -1, target_id: int | None = None) -> Attribution:
    """One of METHODS by name (the app's cached entry point)."""
    if method not in METHODS:
        raise ValueError(f"unknown attribution {method!r}; choose from {', '.join(METHODS)}")
    return METHODS[method](lm, inputs, position, target_id)
