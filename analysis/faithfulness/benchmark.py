"""Faithfulness benchmark: do attention-based attributions point at the token an answer comes from?

Examples come from the lecture corpus (model.lecture), whose answers have known sources: the fact a
retrieval answer is read from, the earlier copy in induction, the subject a verb agrees with, the
opener of a bracket, the aligned source word of a translation. For each example one answer is
scored (drawn with a seeded RNG among the example's answers, so every example weighs the same):
  decoder   tokens[p] is predicted at query q = p − 1 of the full sequence;
  encoder   every answer is replaced by [MASK] (Example.masked_tokens), predicted at q = p;
  encdec    teacher forcing: target token p predicted at q = p − 1; the ground truth is the aligned
            source word, so methods rank source tokens through cross-attention.
Each method scores the ranked tokens for query q, and the example counts as a hit when the top-ranked
token is the answer's source position (support facts do not count). Ranked tokens: every position the
query can see EXCEPT the query position itself and the special tokens ([BOS], [EOS], [SEP], [MASK],
[PAD], [UNK]); for encdec, the non-special source tokens. Ties go to the lowest index.

Methods (A_l [H, q, k] the self-attention of layer l; C_l the cross-attention; mean over heads):
  last_layer  mean_h A_L[q]                        (encdec: mean_h C_L[q])
  head_mean   mean_{l,h} A_l[q]                    (encdec: mean_{l,h} C_l[q])
  rollout     analysis.attention.rollout.attention_rollout(A)[q]   (encdec: cross_rollout(...).source[q])
  flow        analysis.attention.flow.attention_flow(A, q), only where T ≤ 64; not defined for encdec
  attention_norm, value_zeroing   analysis.probes.context_mixing: the last layer's row q (N_L[q], Z_L[q]);
              encdec: the last decoder layer's cross-attention row q over the source (analysis.probes.encdec_mixing)
  relevance   analysis.probes.relevance.gradient_relevance for the correct answer's logit (encdec: source_row)
  input_x_gradient, integrated_gradients, attention_x_gradient   analysis.probes.attributions for the same logit
              (encdec: source_row); the report's "integrated_gradients" gives the baseline, and each example's
              steps and completeness error. Without interventions every example's integrated gradients run
              together (attributions.integrated_gradients_many: the same numbers, passes shared by examples).
top1 = hits / n, n = examples the method scored.

Head ablation: for every attention site and head, that head's pattern is zeroed
(model.hooks.zero_head on "SITE.hook_pattern"), and delta_p is the mean over the same examples of
p(answer | ablated) − p(answer | clean) at the query (softmax over the vocabulary). All heads of one
example run as one batch: row 0 clean, row j+1 with head j zeroed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from attnlab.analysis.attention.flow import MAX_TOKENS, attention_flow
from attnlab.analysis.attention.rollout import attention_rollout, cross_rollout
from attnlab.analysis.faithfulness.cases import Case, chance, make_cases
from attnlab.analysis.probes.ablation import ablation_deltas
from attnlab.analysis.probes.attributions import (
    IG_STAGES,
    attention_x_gradient,
    input_x_gradient,
    integrated_gradients,
    integrated_gradients_many,
)
from attnlab.analysis.probes.context_mixing import METHODS as CONTEXT_MIXING
from attnlab.analysis.probes.context_mixing import context_mixing
from attnlab.analysis.probes.head_table import collect_patterns
from attnlab.analysis.probes.relevance import attention_sites, gradient_relevance
from attnlab.model.inputs import InputError
from attnlab.model.lecture import Example

METHODS = ("last_layer", "head_mean", "rollout", "flow", "attention_norm", "value_zeroing", "relevance",
           "input_x_gradient", "integrated_gradients", "attention_x_gradient")
ONE_STACK = ("flow",)  # defined on one self-attention stack: not scored on an encoder–decoder
GRADIENT_METHODS = {"input_x_gradient": input_x_gradient, "integrated_gradients": integrated_gradients,
                    "attention_x_gradient": attention_x_gradient}  # analysis.probes.attributions
IG = "integrated_gradients"
MAX_EXAMPLES = 5000


# -- attribution -----------------------------------------------------------------------------------------
Interventions = dict | Callable[[Case], dict] | None


def _for_case(interventions: Interventions, case: Case) -> dict | None:
    return interventions(case) if callable(interventions) else interventions


@torch.no_grad()
def clean_patterns(lm, case: Case, interventions: Interventions = None) -> dict[str, np.ndarray]:
    """Patterns per stack (analysis.probes.head_table.collect_patterns) of the case's input."""
    return collect_patterns(lm.forward(case.inputs, interventions=_for_case(interventions, case)).capture)


def one_stack(pats: dict[str, np.ndarray]) -> np.ndarray:
    """The self-attention patterns [L, H, T, T] of a model with one stack (a decoder's or an encoder's)."""
    (a,) = pats.values()
    return a


def method_scores(lm, case: Case, methods=METHODS, interventions: Interventions = None,
                  details: dict | None = None) -> dict[str, np.ndarray]:
    """Each method's score over the ranked positions' axis (target tokens, or source tokens for encdec).
    `details` (a dict) receives each gradient method's analysis.probes.attributions.Attribution."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    pats, q, out = clean_patterns(lm, case, interventions), case.query, {}
    if lm.reads_source:
        cross = pats["cross"]  # [Ld, H, T, S]
        if "last_layer" in methods:
            out["last_layer"] = cross[-1, :, q].mean(0)
        if "head_mean" in methods:
            out["head_mean"] = cross[:, :, q].mean((0, 1))
        if "rollout" in methods:
            out["rollout"] = cross_rollout(pats["encoder"], pats["decoder"], cross).source[q]
        for m in CONTEXT_MIXING:
            if m in methods:  # the cross-attention's last layer, row q over the source
                out[m] = context_mixing(lm, case.inputs, m, _for_case(interventions, case)).cross[-1, q]
    else:
        a = one_stack(pats)  # [L, H, T, T]
        if "last_layer" in methods:
            out["last_layer"] = a[-1, :, q].mean(0)
        if "head_mean" in methods:
            out["head_mean"] = a[:, :, q].mean((0, 1))
        if "rollout" in methods:
            out["rollout"] = attention_rollout(a)[q]
        if "flow" in methods and a.shape[-1] <= MAX_TOKENS:
            out["flow"] = attention_flow(a, q)
        for m in CONTEXT_MIXING:
            if m in methods:
                out[m] = context_mixing(lm, case.inputs, m, _for_case(interventions, case))[-1, q]  # last layer
    if "relevance" in methods:
        rel = gradient_relevance(lm, case.inputs, q, case.answer_id, interventions=_for_case(interventions, case))
        out["relevance"] = rel.source_row if lm.reads_source else rel.row
    for m in methods:
        if m in GRADIENT_METHODS:
            a = GRADIENT_METHODS[m](lm, case.inputs, q, case.answer_id, interventions=_for_case(interventions, case))
            out[m] = a.source_row if lm.reads_source else a.row
            if details is not None:
                details[m] = a
    return out


def scored(lm, methods) -> list[str]:
    """The methods of `methods` this model is scored on (ONE_STACK's not on an encoder–decoder)."""
    return [m for m in methods if not (m in ONE_STACK and lm.reads_source)]


def top1(scores: np.ndarray, candidates: np.ndarray) -> int:
    """Index of the highest score among the candidates (lowest index on ties)."""
    if not candidates.any():
        raise ValueError("no candidate positions to rank")
    return int(np.argmax(np.where(candidates, scores, -np.inf)))


# -- head ablation ---------------------------------------------------------------------------------------
def head_jobs(lm) -> list[tuple[str, int]]:
    """(site, head) for every attention head, in forward order."""
    return [(m.site, h) for m in attention_sites(lm.model) for h in range(m.n_heads)]


@torch.no_grad()
def answer_probability(lm, case: Case) -> tuple[float, bool]:
    """(p(answer), answer is the arg-max) at the query, clean run."""
    logits = lm.forward(case.inputs, records=False).logits[0, case.query].float()
    return float(torch.softmax(logits, -1)[case.answer_id]), int(logits.argmax()) == case.answer_id


# -- the benchmark ---------------------------------------------------------------------------------------
def faithfulness(lm, n: int = 100, seed: int = 0, *, examples: list[Example] | None = None,
                 cases: list[Case] | None = None, methods=METHODS, ablation: bool = True,
                 interventions: Interventions = None, on_step: Callable[[int, int], None] | None = None) -> dict:
    """{"methods": {METHOD: {"top1", "n"}}, "ablation": [{"site", "head", "delta_p"}], plus context}.

    `lm` a LoadedModel with an LM/MLM head; `n` eval examples of its lecture mixture drawn with `seed`
    (or the given `examples`, or ready `cases`). `interventions` (a dict, or case -> dict) apply to the
    attribution runs only — for hand-built tests. Context keys: model, arch, seed, n_examples,
    p_answer (mean clean probability of the correct token), accuracy (share where it is the arg-max),
    chance (the top-1 of a random ranking, averaged), by_task ({task: {METHOD: {"top1", "n"}}}).
    `on_step(done, total)`: called after each slice (one shared pass of integrated gradients, one example);
    the numbers are the same with or without it.
    """
    if not 1 <= n <= MAX_EXAMPLES:
        raise InputError(f"--n must be between 1 and {MAX_EXAMPLES}, got {n}")
    if cases is None:
        cases = make_cases(lm, n, seed, examples)
    if not cases:
        raise InputError("no example has an answer whose source can be ranked")
    methods = scored(lm, methods)
    hits = {m: [] for m in methods}
    tasks: dict[str, dict[str, list]] = {}
    jobs = head_jobs(lm)
    deltas = np.zeros(len(jobs))
    probs, correct, ig = [], [], []
    batched = IG in methods and interventions is None  # every case's integrated gradients in shared passes
    stages, total = [0], len(cases) + (IG_STAGES if batched else 0)
    step = on_step or (lambda done, total: None)

    def stage():
        stages[0] += 1
        step(stages[0], total)

    igs = iter(integrated_gradients_many(lm, [(c.inputs, c.query, c.answer_id) for c in cases], on_stage=stage)
               ) if batched else None
    done = total - len(cases)  # the examples' slices come last, whatever IG's doubling left unused
    for k, case in enumerate(cases):
        task = tasks.setdefault(case.example.task if case.example is not None else "", {m: [] for m in methods})
        details = {IG: next(igs)} if batched else {}
        scores = method_scores(lm, case, [m for m in methods if not (batched and m == IG)], interventions, details)
        if batched:
            scores[IG] = details[IG].source_row if lm.reads_source else details[IG].row
        for m, s in scores.items():
            hit = top1(s, case.candidates) in case.sources
            hits[m].append(hit)
            task[m].append(hit)
        if IG in details:
            ig.append(details[IG])
        p, ok = answer_probability(lm, case)
        probs.append(p)
        correct.append(ok)
        if ablation:
            deltas += ablation_deltas(lm, case.inputs, case.query, case.answer_id, jobs)
        step(done + k + 1, total)
    deltas /= len(cases)
    return {
        "model": lm.name, "arch": lm.arch, "seed": seed, "n_examples": len(cases),
        "p_answer": float(np.mean(probs)), "accuracy": float(np.mean(correct)),
        "chance": float(np.mean([chance(c) for c in cases])),
        "by_task": {t: {m: {"top1": float(np.mean(h)), "n": len(h)} for m, h in v.items() if h}
                    for t, v in sorted(tasks.items())},
        "methods": {m: {"top1": float(np.mean(h)) if h else 0.0, "n": len(h)} for m, h in hits.items()},
        "ablation": [{"site": s, "head": h, "delta_p": float(d)} for (s, h), d in zip(jobs, deltas)]
        if ablation else [],
        **({"integrated_gradients": ig_report(ig)} if ig else {}),
    }


def ig_report(ig: list) -> dict:
    """Integrated gradients' baseline, its gradient rows (forward + backward) per example on average, and per
    example its steps, rows, y(input), y(baseline) and completeness error."""
    errors = [a.completeness_error for a in ig]
    return {"baseline": ig[0].baseline, "max_error": float(max(errors)), "mean_error": float(np.mean(errors)),
            "mean_rows": float(np.mean([a.rows for a in ig])),
            "examples": [{"steps": a.steps, "rows": a.rows, "logit": a.logit, "baseline_logit": a.baseline_logit,
                          "completeness_error": a.completeness_error} for a in ig]}


def top_heads(report: dict, k: int = 3) -> list[dict]:
    """The k ablation entries with the largest |delta_p| (most negative first on ties)."""
    return sorted(report["ablation"], key=lambda r: (-abs(r["delta_p"]), r["delta_p"]))[:k]
