"""Gradient attributions of one logit to the input tokens: input × gradient, integrated gradients and
attention × gradient.

y is the logit of `target_id` at output position q (a ViT: the class logit read from [CLS]). e_i [D] is the
input embedding of token i: its token embedding before positions and token types are added (a ViT: [CLS] and
each patch's projection, before positions) — the value of the model's `hook_embed` point.

  input_x_gradient      a_i = Σ_d e_id · ∂y/∂e_id                           (Shrikumar et al. 2016)
  integrated_gradients  a_i = Σ_d (e_id − b_id) · ∫₀¹ ∂y/∂e_id (b + α(e − b)) dα   (Sundararajan et al. 2017)
      baseline b: every token that is not special (BOS, EOS, PAD, MASK) replaced by [PAD], positions kept; the
      zero embedding where the tokenizer has no [PAD]; a ViT: every patch's embedding zero, [CLS] kept. The integral is composite
      Gauss–Legendre: `steps` nodes in panels placed where y moves most along the path (found by forward runs
      alone; a trained model's y can jump by several logits within 1/800 of the path where a head switches
      keys); every node, the input (α = 1) and the baseline (α = 0) run as one batch: one forward, one
      backward. By default 64 nodes, doubled (at most 512) while completeness is off by more than 1 %.
      Completeness: Σ_i a_i = y(e) − y(b) up to the quadrature error; `completeness_error` =
      |Σ_i a_i − (y(e) − y(b))| / |y(e) − y(b)|.
  attention_x_gradient  a_k = Σ_sites Σ_h Σ_i A_h[i, k] · ∂y/∂A_h[i, k]
      every attention edge i → k of every site (self- and cross-attention, every layer and head) weighted by
      the gradient of y with respect to its weight and credited to its key token k: the first-order (Taylor)
      estimate of how much y falls when every edge into k is cut. Signed; no head mean, no positive part and
      no rollout (Chefer et al.'s Ā in analysis/relevance.py is mean_h relu(∇A ⊙ A), rolled out).
Encoder–decoder: `row` scores the target tokens and `source_row` the source tokens (both embeddings move
together along the IG path; encoder self-attention and cross-attention edges credit source keys). A ViT's
[CLS] is kept in the baseline, so its IG is 0.
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
    baseline_name,
    check_position,
    logit_at,
    per_token,
    token_rows,
)
from attnlab.analysis.probes.pass_size import max_tokens
from attnlab.analysis.probes.relevance import attention_sites
from attnlab.model.inputs import InputError

STEPS, MAX_STEPS, TOLERANCE = 64, 512, 0.01  # IG's gradient nodes: first try, most, completeness to reach
IG_STAGES = 3 + int(np.log2(MAX_STEPS // STEPS)) + 1  # integrated_gradients_many's shared passes, at most
PER_PANEL = 4  # Gauss–Legendre nodes per panel
SCAN, REFINE, SCAN_SUB, UNIFORM = 32, 4, 8, 0.5  # where the panels go (panels())


@dataclass
class Attribution:
    """One method's scores for one logit. row [T] over the (target-side) tokens, source_row [S] (encoder–
    decoder), target_id and logit y(e) at `position`. Integrated gradients also: steps, baseline_logit y(b),
    completeness_error (module docstring)."""

    row: np.ndarray
    target_id: int
    logit: float
    position: int
    source_row: np.ndarray | None = None
    steps: int | None = None
    baseline_logit: float | None = None
    completeness_error: float | None = None
    baseline: str | None = None

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
def quadrature(bounds: np.ndarray, per_panel: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss–Legendre on the panels [bounds[j], bounds[j+1]]: nodes α and weights w, ∫ f ≈ Σ w f(α)."""
    x, w = np.polynomial.legendre.leggauss(per_panel)
    lo, width = bounds[:-1, None], np.diff(bounds)[:, None]  # [P, 1]
    return (lo + (x + 1) / 2 * width).ravel(), (w / 2 * width).ravel()  # [P, m] -> [P · m]


def scan(lm, inputs, pos: int, tid: int, interventions=None) -> tuple[np.ndarray, np.ndarray]:
    """(α, y(α)) by forward runs only: SCAN + 1 even points, then the REFINE intervals where y moves most cut
    into SCAN_SUB, twice (the finest step 1 / (SCAN · SCAN_SUB²))."""
    a = np.linspace(0.0, 1.0, SCAN + 1)
    y = along_path(lm, inputs, pos, tid, torch.tensor(a), interventions, grad=False).y.double().cpu().numpy()
    for _ in range(2):
        new = refine_points(a, y)
        y_new = along_path(lm, inputs, pos, tid, torch.tensor(new), interventions, grad=False).y.double().cpu().numpy()
        a, y = merge_points(a, y, new, y_new)
    return a, y


def refine_points(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The new α's of one refinement: the REFINE intervals where y moves most, each cut into SCAN_SUB."""
    top = np.argsort(-np.abs(np.diff(y)))[:REFINE]
    return np.concatenate([np.linspace(a[k], a[k + 1], SCAN_SUB + 1)[1:-1] for k in top])


def merge_points(a, y, new, y_new) -> tuple[np.ndarray, np.ndarray]:
    """(α, y) and the new points, sorted by α."""
    a, y = np.concatenate([a, new]), np.concatenate([y, y_new])
    order = np.argsort(a)
    return a[order], y[order]


def panels(a: np.ndarray, y: np.ndarray, n_panels: int) -> np.ndarray:
    """Panel bounds on [0, 1] holding equal shares of |Δy| + UNIFORM · (its mean rate) · Δα over the scan."""
    d = np.abs(np.diff(y))
    d = d + UNIFORM * d.sum() * np.diff(a) + 1e-12  # [len(a) − 1]
    share = np.concatenate([[0.0], np.cumsum(d)]) / d.sum()
    return np.interp(np.linspace(0, 1, n_panels + 1), share, a)


def integrated_gradients(lm, inputs, position: int = -1, target_id: int | None = None, steps: int | None = None,
                         interventions=None) -> Attribution:
    """Integrated gradients from the baseline (module docstring), with y(e), y(b) and completeness. steps None:
    STEPS nodes, doubled (up to MAX_STEPS) while the completeness error is above TOLERANCE."""
    if steps is not None and (not PER_PANEL <= steps <= MAX_STEPS or steps % PER_PANEL):
        raise InputError(f"integrated gradients takes a multiple of {PER_PANEL} steps from {PER_PANEL} to "
                         f"{MAX_STEPS}, not {steps}")
    pos = check_position(lm, inputs, position)
    if target_id is None:
        target_id = along_path(lm, inputs, pos, None, torch.ones(1, dtype=torch.float64), interventions, False).target_id
    a, y = scan(lm, inputs, pos, target_id, interventions)
    n = steps or STEPS
    while True:
        ig = _integrate(lm, inputs, pos, target_id, panels(a, y, n // PER_PANEL), interventions)
        if steps is not None or ig.completeness_error <= TOLERANCE or 2 * n > MAX_STEPS:
            return ig
        n *= 2


def ig_passes() -> int:
    """Forward passes' worth of one integrated_gradients call at most: the target's and the scan's forwards,
    then STEPS, 2·STEPS … MAX_STEPS nodes (each + the input and the baseline) with a backward (≈ 3 forwards)."""
    scan_rows = 1 + (SCAN + 1) + 2 * REFINE * (SCAN_SUB - 1)
    node_rows, n = 0, STEPS
    while n <= MAX_STEPS:
        node_rows, n = node_rows + n + 2, 2 * n
    return scan_rows + 3 * node_rows


def ig_refusal(lm, t: int) -> str | None:
    """One line when `t` tokens are more than integrated gradients takes on this model (pass_size), else None."""
    n = max_tokens(lm, ig_passes())
    if t <= n:
        return None
    return (f"not run on this text: up to {ig_passes():,} forward passes over {lm.name} (a scan, then up to "
            f"{MAX_STEPS} gradient steps) cost more than about a minute of one CPU core beyond T = {n} tokens on "
            f"this model; this text has {t}.")


def _integrate(lm, inputs, pos: int, tid: int, bounds: np.ndarray, interventions) -> Attribution:
    alphas, w = _ig_nodes(bounds)  # [steps + 2]: the nodes, the input, the baseline (which give y alone)
    steps = len(alphas) - 2
    return _ig_result(lm, inputs, along_path(lm, inputs, pos, tid, alphas, interventions, weights=w), steps)


def _ig_nodes(bounds: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(α [steps + 2], w [steps + 2]): the quadrature's nodes, then the input and the baseline (weights 0)."""
    nodes, weights = quadrature(bounds, PER_PANEL)
    return torch.tensor(np.concatenate([nodes, [1.0, 0.0]])), torch.tensor(np.concatenate([weights, [0.0, 0.0]]))


def _ig_result(lm, inputs, p, steps: int) -> Attribution:
    """The Attribution of one integration's path (rows: `steps` nodes, the input, the baseline)."""
    per = {n: per_token((e - p.bases[n]).double() * p.grads[n])[0] for n, e in p.embeds.items()}  # ∫₀¹ ∇y dα
    target, source = token_rows(lm, per)
    y_x, y_b = float(p.y[steps]), float(p.y[steps + 1])
    ig = Attribution(target, p.target_id, y_x, p.position, source, steps=steps, baseline_logit=y_b,
                     baseline=baseline_name(lm, inputs))
    ig.completeness_error = abs(ig.total - (y_x - y_b)) / max(abs(y_x - y_b), 1e-12)
    return ig


def integrated_gradients_many(lm, jobs: list[tuple], steps: int | None = None,
                              on_stage: Callable[[], None] | None = None) -> list[Attribution]:
    """integrated_gradients for many (inputs, position, target_id) at once, equal to one call each (to float
    rounding): the same scan, panels and doubling, every input's rows of each stage in shared passes
    (embed_path.along_paths). A target_id None is the predicted token, as there. `on_stage()`: called after
    each shared pass (at most IG_STAGES: the scan's three, then one per doubling of the steps)."""
    tick = on_stage or (lambda: None)
    if steps is not None and (not PER_PANEL <= steps <= MAX_STEPS or steps % PER_PANEL):
        raise InputError(f"integrated gradients takes a multiple of {PER_PANEL} steps from {PER_PANEL} to "
                         f"{MAX_STEPS}, not {steps}")
    jobs = [(inp, check_position(lm, inp, p), t) for inp, p, t in jobs]
    one = torch.ones(1, dtype=torch.float64)
    tids = [t if t is not None else along_path(lm, inp, p, None, one, grad=False).target_id for inp, p, t in jobs]

    def ys(alphas: list[np.ndarray], which: list[int]) -> list[np.ndarray]:
        got = along_paths(lm, [PathJob(jobs[i][0], jobs[i][1], tids[i], torch.tensor(alphas[k]))
                               for k, i in enumerate(which)], grad=False)
        return [p.y.numpy() for p in got]

    every = list(range(len(jobs)))
    a = [np.linspace(0.0, 1.0, SCAN + 1) for _ in jobs]
    y = ys(a, every)
    tick()
    for _ in range(2):  # scan(): the same two refinements
        new = [refine_points(a[i], y[i]) for i in every]
        pts = [merge_points(a[i], y[i], new[i], yn) for i, yn in zip(every, ys(new, every))]
        a, y = [p[0] for p in pts], [p[1] for p in pts]
        tick()
    n, out, left = {i: steps or STEPS for i in every}, {}, every
    while left:
        nodes = {i: _ig_nodes(panels(a[i], y[i], n[i] // PER_PANEL)) for i in left}
        paths = along_paths(lm, [PathJob(jobs[i][0], jobs[i][1], tids[i], *nodes[i]) for i in left])
        for i, p in zip(left, paths):
            out[i] = _ig_result(lm, jobs[i][0], p, n[i])
        tick()
        left = [i for i in left if steps is None and out[i].completeness_error > TOLERANCE and 2 * n[i] <= MAX_STEPS]
        for i in left:
            n[i] *= 2
    return [out[i] for i in every]


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
        tid = int(logits.argmax()) if target_id is None else int(target_id)
        if not 0 <= tid < logits.shape[-1]:
            raise InputError(f"target id {tid} is outside 0..{logits.shape[-1] - 1}")
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
