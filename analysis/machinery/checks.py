"""`attnlab check`: the verdicts, their tolerances, and the named checks they are composed of.

Each check function runs its comparison once and returns a `CheckResult`: its rows of the report and the
detail a page draws (matrices, per-step and per-site numbers). `run_checks` is their concatenation, so a
page that calls one check shows exactly the numbers `attnlab check` prints for it:

    check_invariants      rows_sum_to_one, no_mass_outside_mask, finite      (eager capture)
    check_backend         eager_vs_sdpa, eager_vs_flash                        (analysis.machinery.backends)
    check_kv_cache        cache_vs_no_cache_logits, cache_vs_no_cache_pattern  (analysis.machinery.kv_cache)
    check_greedy_cache    greedy_cache_tokens_equal                            (analysis.machinery.kv_cache)

The tolerances follow the model's dtype (`rules_for`): float32 keeps the tolerances below; a 16-bit model
(bfloat16, float16) compares its fused backends with a float32 eager reference (the model's fp32 copy)
within TOL_HALF, and no worse than HALF_VS_EAGER × the error of eager in the same dtype against it.

A transformers view (model/view) returns weights only and runs transformers' eager attention: its invariants
are checked on those weights; the backend, cache and greedy rows SKIP with a note saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.machinery.backends import compare_backends
from attnlab.analysis.machinery.kv_cache import cache_generation, cached_chunks
from attnlab.model.config import BACKENDS
from attnlab.model.device import dtype_name, is_half
from attnlab.model.record import AttentionRecord

TOL_BACKEND = 1e-5  # fp32 CPU: eager vs sdpa vs flash, outputs and patterns
TOL_CACHE = 1e-5  # cached vs uncached logits and pattern rows
TOL_ROWSUM = 1e-5
FUSED = tuple(b for b in BACKENDS if b != "eager")  # the backends compared with eager
CACHE_BACKEND = "sdpa"  # the backend of the cache checks
GREEDY_TOKENS = 20  # greedy tokens generated with and without the cache
TOL_HALF = 4e-2  # bf16/fp16: fused vs the fp32 eager reference, and cached vs uncached
HALF_VS_EAGER = 2.0  # bf16/fp16: a fused backend's error vs the fp32 reference ≤ this × eager's (same dtype)


def scaled_tolerance(tol: float, reference) -> float:
    """tol · max(1, max|reference|): absolute for values of order 1 (patterns, small models), relative
    for large logits, where float32 keeps about 7 digits (logits of ±20 differ by ~1e-6 per ulp)."""
    ref = reference.abs().max() if torch.is_tensor(reference) else np.abs(reference).max()
    return tol * max(1.0, float(ref))


@dataclass(frozen=True)
class Rules:
    """The tolerances of one dtype: backends, cache, row sums; `vs_eager` (16-bit only) bounds a fused
    backend's error against the float32 reference by that multiple of eager's in the same dtype."""

    dtype: str
    backend: float
    cache: float
    rowsum: float
    vs_eager: float | None = None

    @property
    def half(self) -> bool:
        return self.vs_eager is not None

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "reference": "float32 eager" if self.half else "eager (same dtype)",
                "backend": self.backend, "backend_vs_eager_factor": self.vs_eager, "cache": self.cache,
                "row_sum": self.rowsum}


FP32 = Rules("float32", TOL_BACKEND, TOL_CACHE, TOL_ROWSUM)


def rules_for(dtype: torch.dtype) -> Rules:
    """FP32 for float32 (and float64); for bfloat16/float16 TOL_HALF, HALF_VS_EAGER, and row sums within the
    dtype's machine epsilon (one rounding of a softmax that sums to 1)."""
    if not is_half(dtype):
        return FP32
    return Rules(dtype_name(dtype), TOL_HALF, TOL_HALF, float(torch.finfo(dtype).eps), HALF_VS_EAGER)


@dataclass
class Check:
    name: str
    value: float | None
    tolerance: float | None
    passed: bool
    note: str = ""

    def to_dict(self) -> dict:
        d = {"name": self.name, "value": self.value, "tolerance": self.tolerance, "passed": self.passed}
        if self.note:
            d["note"] = self.note
        return d


@dataclass
class CheckResult:
    """One check function's rows of the report and the detail behind them."""

    checks: list[Check]
    detail: dict

    @property
    def rows(self) -> list[dict]:
        """The rows as `attnlab check --json` prints them."""
        return [c.to_dict() for c in self.checks]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


# -- invariants -------------------------------------------------------------------------------------------
def invariants(records: dict[str, AttentionRecord]) -> dict[str, float]:
    """Worst row-sum error (rows with any visible key), largest weight outside the mask, non-finite count."""
    row_err, outside, nonfinite = 0.0, 0.0, 0
    for rec in records.values():
        has_scores = rec.q is not None or rec.scores_full is not None  # a view's record holds weights only
        for b in range((rec.q if rec.q is not None else rec.pattern_full).shape[0]):
            p = rec.pattern(batch=b)  # [H, q, k]
            m = rec.mask_for(b)  # [q, k]
            nonfinite += int((~np.isfinite(p)).sum() + (~np.isfinite(rec.scores(batch=b))).sum() if has_scores
                             else (~np.isfinite(p)).sum())
            live = m.any(-1)  # rows with at least one visible key
            sums = p.sum(-1)[:, live]  # [H, live rows]
            if sums.size:
                row_err = max(row_err, float(np.abs(sums - 1).max()))
            dead = p.sum(-1)[:, ~live]
            if dead.size:
                row_err = max(row_err, float(np.abs(dead).max()))  # fully masked rows must be 0
            if (~m).any():
                outside = max(outside, float(np.abs(p[:, ~m]).max()))
    return {"row_sum_error": row_err, "mass_outside_mask": outside, "nonfinite": nonfinite}


def check_invariants(lm, inputs) -> CheckResult:
    """Every eager pattern: rows sum to one, nothing outside the mask, everything finite."""
    tol = rules_for(lm.dtype).rowsum
    cap = lm.forward(inputs, backend="eager", as_computed=True).capture  # a 16-bit model: its own softmax
    inv = invariants({s: cap[s] for s in cap.sites})
    return CheckResult([
        Check("rows_sum_to_one", inv["row_sum_error"], tol, inv["row_sum_error"] <= tol),
        Check("no_mass_outside_mask", inv["mass_outside_mask"], 0.0, inv["mass_outside_mask"] == 0.0),
        Check("finite", float(inv["nonfinite"]), 0.0, inv["nonfinite"] == 0)], inv)


# -- what a transformers view cannot run ------------------------------------------------------------------
VIEW_NO_FUSED = ("not applicable: a transformers view runs transformers' eager attention only (no fused backend "
                 "of ours to compare)")
VIEW_NO_CACHE = "not applicable: a transformers view has no KV cache of ours"
VIEW_NO_GREEDY = "not applicable: a transformers view does not generate (no KV cache of ours)"


def view_skips() -> list[Check]:
    """The rows a transformers view skips (backends, cache, greedy), each with its reason."""
    rows = [(f"eager_vs_{b}", VIEW_NO_FUSED) for b in FUSED] + [
        ("cache_vs_no_cache_logits", VIEW_NO_CACHE), ("cache_vs_no_cache_pattern", VIEW_NO_CACHE),
        ("greedy_cache_tokens_equal", VIEW_NO_GREEDY)]
    return [Check(name, None, None, True, note=why) for name, why in rows]


# -- backends ---------------------------------------------------------------------------------------------
def check_backend(lm, inputs, other: str) -> CheckResult:
    """`eager_vs_<other>`: patterns within TOL_BACKEND absolute, logits and hidden states within
    TOL_BACKEND·max(1, max|logits|). Detail: analysis.machinery.backends.compare_backends plus its `tolerance`.
    A 16-bit model: `check_backend_half`."""
    rules = rules_for(lm.dtype)
    if rules.half:
        return check_backend_half(lm, inputs, other, rules)
    rep = compare_backends(lm, inputs, other)
    rep["tolerance"] = scaled_tolerance(TOL_BACKEND, rep["scale"])
    worst = max(rep["max_abs_logits"], rep["max_abs_hidden"])
    ok = worst <= rep["tolerance"] and rep["max_abs_pattern"] <= TOL_BACKEND
    note = (f"patterns within {TOL_BACKEND:g} absolute (worst {rep['max_abs_pattern']:.2e}); "
            f"outputs within {TOL_BACKEND:g}·max(1, max|logits|); kernel: " + ", ".join(rep["kernels"]) + _flips(rep))
    return CheckResult([Check(f"eager_vs_{other}", max(worst, rep["max_abs_pattern"]), rep["tolerance"], ok,
                              note=note)], rep)


def _flips(rep: dict) -> str:
    """A mixture of experts' note: the fused run took the reference's experts, and how many it would not have."""
    if rep.get("routing_flips") is None:
        return ""
    return f"; experts pinned to the reference's ({rep['routing_flips']} token-layers would route otherwise)"


def check_backend_half(lm, inputs, other: str, rules: Rules) -> CheckResult:
    """`eager_vs_<other>` of a 16-bit model: `other` in the model's dtype against the float32 eager reference —
    patterns within rules.backend (or rules.vs_eager × eager's own pattern error in the same dtype, where that is
    larger: peaked patterns of large scores lose more to 16-bit rounding), outputs within
    rules.backend·max(1, max|logits|), and the worst output error at most rules.vs_eager × that of eager in the
    same dtype. Detail: compare_backends against the
    reference, plus `tolerance`, `eager_error` (eager in the dtype vs the reference) and `rules`."""
    ref = lm.reference_model()
    rep = compare_backends(lm, inputs, other, ref_lm=ref)
    eager = compare_backends(lm, inputs, "eager", ref_lm=ref)
    rep["tolerance"] = scaled_tolerance(rules.backend, rep["scale"])
    rep["rules"] = rules.to_dict()
    rep["eager_error"] = {k: eager[k] for k in ("max_abs_logits", "max_abs_hidden", "max_abs_pattern")}
    worst = max(rep["max_abs_logits"], rep["max_abs_hidden"])
    eager_worst = max(eager["max_abs_logits"], eager["max_abs_hidden"])
    rep["vs_eager"] = worst / eager_worst if eager_worst > 0 else (0.0 if worst == 0 else float("inf"))
    pattern_bound = max(rules.backend, rules.vs_eager * eager["max_abs_pattern"])
    ok = (worst <= rep["tolerance"] and rep["max_abs_pattern"] <= pattern_bound
          and worst <= rules.vs_eager * eager_worst + 1e-6)
    note = (f"{rules.dtype} vs the float32 eager reference: patterns within {pattern_bound:.3g} absolute (worst "
            f"{rep['max_abs_pattern']:.2e}, eager's {eager['max_abs_pattern']:.2e}); outputs within {rules.backend:g}·max(1, max|logits|) and at most "
            f"{rules.vs_eager:g}× eager in {rules.dtype} (worst {worst:.2e} vs eager's {eager_worst:.2e}); "
            "kernel: " + ", ".join(rep["kernels"]) + _flips(rep))
    return CheckResult([Check(f"eager_vs_{other}", max(worst, rep["max_abs_pattern"]), rep["tolerance"], ok,
                              note=note)], rep)


# -- KV cache ---------------------------------------------------------------------------------------------
def check_kv_cache(lm, inputs, backend: str = CACHE_BACKEND) -> CheckResult:
    """Cached chunks vs one uncached pass: logits within TOL_CACHE·max(1, max|logits|), stitched pattern
    rows within TOL_CACHE. Detail: analysis.machinery.kv_cache.cached_chunks (bounds, steps, stitched and full
    matrices per site) plus its `tolerance`; for an encoder, two rows marked not applicable."""
    if not lm.has_cache:
        na = f"not applicable: {'a vision transformer' if lm.reads_image else 'an encoder'} has no KV cache"
        return CheckResult([Check(n, None, TOL_CACHE, True, note=na)
                            for n in ("cache_vs_no_cache_logits", "cache_vs_no_cache_pattern")], {})
    base = rules_for(lm.dtype).cache
    run = cached_chunks(lm, inputs, backend)
    run["tolerance"] = tol = scaled_tolerance(base, run["logits_scale"])
    return CheckResult([
        Check("cache_vs_no_cache_logits", run["max_abs_logits"], tol, run["max_abs_logits"] <= tol,
              note=f"tolerance {base:g}·max(1, max|logits|)"),
        Check("cache_vs_no_cache_pattern", run["max_abs_pattern"], base, run["max_abs_pattern"] <= base)],
        run)


def _judge_steps(gen: dict, base: float = TOL_CACHE) -> dict:
    """attnlab.analysis.machinery.kv_cache.cache_generation with a verdict per step: max |Δlogits| within the tolerance
    (base·max(1, max|logits|) over all steps) and the same token; `passed` when every step passes."""
    tol = max((scaled_tolerance(base, s["scale"]) for s in gen["steps"]), default=base)
    steps = [s | {"passed": s["max_abs_logits"] <= tol and s["same_token"]} for s in gen["steps"]]
    return gen | {"steps": steps, "tolerance": tol, "tolerance_base": base,
                  "passed": all(s["passed"] for s in steps) and gen["same_length"]}


def check_greedy_cache(lm, inputs, n_new: int = GREEDY_TOKENS, backend: str = CACHE_BACKEND) -> CheckResult:
    """`greedy_cache_tokens_equal`: greedy ids with and without the cache, the count of positions that
    differ (a prompt that fills the context generates nothing, so nothing differs). Detail: the
    generation judged step by step. An encoder generates nothing: no rows."""
    if not lm.has_cache:
        return CheckResult([], {})
    gen = _judge_steps(cache_generation(lm, inputs, n_new, backend), rules_for(lm.dtype).cache)
    n = gen["n_different"]
    return CheckResult([Check("greedy_cache_tokens_equal", float(n), 0.0, n == 0)], gen)


def generation_steps(lm, inputs, n_new: int, backend: str = CACHE_BACKEND) -> dict:
    """The KV-cache page's generation: `check_greedy_cache`'s detail for `n_new` tokens under `backend`,
    with an error when the prompt leaves no room for a new token (there is nothing to show)."""
    return _shown(check_greedy_cache(lm, inputs, n_new, backend).detail, lm.context)


def first_steps(greedy: dict, n_new: int) -> dict:
    """generation_steps(lm, inputs, n_new) from `check_greedy_cache`'s detail of the same inputs and backend
    with n_new or more tokens: its first n_new steps judged again, without generating again (greedy
    generation's first steps do not depend on how many follow, and both stop at the same full context)."""
    if not greedy:
        return _shown(greedy, 0)
    T0, n = greedy["prompt_len"], n_new
    a, b = greedy["cached_ids"][:T0 + n], greedy["uncached_ids"][:T0 + n]
    steps = [{k: v for k, v in s.items() if k != "passed"} for s in greedy["steps"][:n]]
    gen = greedy | {"cached_ids": a, "uncached_ids": b, "steps": steps, "same_length": len(a) == len(b),
                    "n_different": int(sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))),
                    "max_abs_logits": max((s["max_abs_logits"] for s in steps), default=0.0),
                    "cached": greedy["cached"][:n], "uncached": greedy["uncached"][:n]}
    return _shown(_judge_steps(gen, greedy["tolerance_base"]), T0)


def _shown(gen: dict, context: int) -> dict:
    """`gen`, or the error that there is nothing to show: an encoder's (empty) or a full context's (no steps)."""
    if not gen:
        raise ValueError("an encoder has no KV cache; pick a decoder or an encoder–decoder")
    if not gen["steps"]:
        raise ValueError(f"the prompt already fills the model's context ({context:,} tokens here); shorten it")
    return gen


# -- all checks -----------------------------------------------------------------------------------------
def run_checks(lm, inputs) -> dict:
    """The `attnlab check` report: {"passed": bool, "checks": [...]}, the named checks in order. Away from
    float32 on the CPU it also says where it ran and under which rules: "device", "dtype", "rules"."""
    if not lm.capabilities.converted:  # a transformers view: its weights' invariants, the rest skipped
        checks = check_invariants(lm, inputs).checks + view_skips()
    else:
        results = [check_invariants(lm, inputs), *(check_backend(lm, inputs, b) for b in FUSED),
                   check_kv_cache(lm, inputs), check_greedy_cache(lm, inputs)]
        checks = [c for r in results for c in r.checks]
    report = {"passed": all(c.passed for c in checks), "checks": [c.to_dict() for c in checks]}
    rules = rules_for(lm.dtype)
    if rules.half or lm.device != "cpu":
        report |= {"device": lm.device, "dtype": dtype_name(lm.dtype), "rules": rules.to_dict()}
    return report
