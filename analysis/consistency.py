"""Consistency reports: invariants of captured attention, eager vs fused backends, cached vs uncached.

These are the numbers `attnlab check` prints and the Backends and KV-cache pages show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.cache import KVCache
from model.record import AttentionRecord

TOL_BACKEND = 1e-5  # fp32 CPU: eager vs sdpa vs flash, outputs and patterns
TOL_CACHE = 1e-5  # cached vs uncached logits and pattern rows
TOL_ROWSUM = 1e-5


def scaled_tolerance(tol: float, reference) -> float:
    """tol · max(1, max|reference|): absolute for values of order 1 (patterns, small models), relative
    for large logits, where float32 keeps about 7 digits (logits of ±20 differ by ~1e-6 per ulp)."""
    ref = reference.abs().max() if torch.is_tensor(reference) else np.abs(reference).max()
    return tol * max(1.0, float(ref))


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


# -- invariants -------------------------------------------------------------------------------------------
def invariants(records: dict[str, AttentionRecord]) -> dict[str, float]:
    """Worst row-sum error (rows with any visible key), largest weight outside the mask, non-finite count."""
    row_err, outside, nonfinite = 0.0, 0.0, 0
    for rec in records.values():
        for b in range(rec.q.shape[0]):
            p = rec.pattern(batch=b)  # [H, q, k]
            m = rec.mask_for(b)  # [q, k]
            nonfinite += int((~np.isfinite(p)).sum() + (~np.isfinite(rec.scores(batch=b))).sum())
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


# -- forward helpers -------------------------------------------------------------------------------------
def captured(lm, inputs, backend: str):
    """(output, records) of one forward under `backend` with capture on."""
    out = lm.forward(inputs, backend=backend)
    return out, {s: out.capture[s] for s in out.capture.sites}


def _max_abs(a, b) -> float:
    if a is None or b is None:
        return 0.0
    return float((a - b).abs().max()) if torch.is_tensor(a) else float(np.abs(a - b).max())


# -- backends ---------------------------------------------------------------------------------------------
def backend_report(lm, inputs, other: str, ref: str = "eager") -> dict:
    """Max |Δ| of logits, hidden states and every site's pattern between `ref` and `other`, per layer."""
    out_a, rec_a = captured(lm, inputs, ref)
    out_b, rec_b = captured(lm, inputs, other)
    per_site = {s: _max_abs(rec_a[s].pattern(), rec_b[s].pattern()) for s in rec_a}
    scale_ref = out_a.logits if out_a.logits is not None else out_a.hidden
    return {
        "backend": other, "reference": ref,
        "tolerance": scaled_tolerance(TOL_BACKEND, scale_ref),
        "max_abs_logits": _max_abs(out_a.logits, out_b.logits),
        "max_abs_hidden": _max_abs(out_a.hidden, out_b.hidden),
        "max_abs_pattern": max(per_site.values(), default=0.0),
        "per_site": per_site,
        "kernels": sorted({r.kernel for r in rec_b.values()}),
    }


# -- KV cache ---------------------------------------------------------------------------------------------
def chunks(T: int) -> list[tuple[int, int]]:
    """Step boundaries: a prefill of half the text, one 2-token chunk (a bottom-right mask), then 1 by 1."""
    first = max(1, T // 2)
    bounds = [(0, first)]
    if first + 2 <= T:
        bounds.append((first, first + 2))
    start = bounds[-1][1]
    bounds += [(t, t + 1) for t in range(start, T)]
    return bounds


@torch.no_grad()
def cache_report(lm, inputs, backend: str = "sdpa") -> dict:
    """Cached steps vs one uncached pass: per-step max |Δlogits| and stitched pattern rows."""
    if not lm.has_cache:
        raise ValueError("an encoder has no KV cache")
    full, full_rec = captured(lm, inputs, backend)
    T = inputs.ids.shape[1]
    cache, steps, step_records = KVCache(), [], {}
    for a, b in chunks(T):
        out = lm.forward(inputs.span(a, b), backend=backend, cache=cache)
        for site in out.capture.sites:
            step_records.setdefault(site, []).append(out.capture[site])
        steps.append({"start": a, "stop": b,
                          "max_abs_logits": _max_abs(out.logits, full.logits[:, a:b]),
                          "argmax_equal": bool((out.logits.argmax(-1) == full.logits[:, a:b].argmax(-1)).all())})
    pattern_err = {}
    for site, recs in step_records.items():
        if sum(r.q_len for r in recs) != T:  # the encoder ran once over the source: nothing cached to compare
            continue
        stitched = stitch(recs, T)  # [H, T, K]
        pattern_err[site] = _max_abs(stitched, full_rec[site].pattern())
    return {"backend": backend, "steps": steps, "tolerance": scaled_tolerance(TOL_CACHE, full.logits),
            "max_abs_logits": max(s["max_abs_logits"] for s in steps),
            "max_abs_pattern": max(pattern_err.values()), "per_site": pattern_err}


def stitch(step_records: list[AttentionRecord], T: int) -> np.ndarray:
    """Place each cached step's rows at their absolute offset: [H, T, K] (K = the full key length)."""
    last = step_records[-1]
    H, K = last.n_heads, last.k_len
    out = np.zeros((H, T, K), dtype=np.float32)
    for r in step_records:
        out[:, r.q_offset : r.q_offset + r.q_len, : r.k_len] = r.pattern()
    return out


@torch.no_grad()
def greedy_report(lm, inputs, n_new: int = 20, backend: str = "sdpa") -> dict:
    """Greedy ids with and without the cache; positions where they differ."""
    a = torch.tensor(lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=True,
                                 stop_at_eos=False)[0])
    b = torch.tensor(lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=False,
                                 stop_at_eos=False)[0])
    n = min(len(a), len(b))
    diff = int((a[:n] != b[:n]).sum()) + abs(len(a) - len(b))
    return {"cached": a.tolist(), "uncached": b.tolist(), "n_different": diff, "equal": diff == 0}


# -- all checks -----------------------------------------------------------------------------------------
def run_checks(lm, inputs) -> dict:
    """The `attnlab check` report: {"passed": bool, "checks": [...]}."""
    checks: list[Check] = []
    _, records = captured(lm, inputs, "eager")
    inv = invariants(records)
    checks.append(Check("rows_sum_to_one", inv["row_sum_error"], TOL_ROWSUM, inv["row_sum_error"] <= TOL_ROWSUM))
    checks.append(Check("no_mass_outside_mask", inv["mass_outside_mask"], 0.0, inv["mass_outside_mask"] == 0.0))
    checks.append(Check("finite", float(inv["nonfinite"]), 0.0, inv["nonfinite"] == 0))
    for other in ("sdpa", "flash"):
        rep = backend_report(lm, inputs, other)
        worst = max(rep["max_abs_logits"], rep["max_abs_hidden"])
        ok = worst <= rep["tolerance"] and rep["max_abs_pattern"] <= TOL_BACKEND
        checks.append(Check(f"eager_vs_{other}", max(worst, rep["max_abs_pattern"]), rep["tolerance"], ok,
                            note=f"patterns within {TOL_BACKEND:g} absolute (worst {rep['max_abs_pattern']:.2e}); "
                                 f"outputs within {TOL_BACKEND:g}·max(1, max|logits|); kernel: " + ", ".join(rep["kernels"])))
    if not lm.has_cache:
        for name in ("cache_vs_no_cache_logits", "cache_vs_no_cache_pattern"):
            checks.append(Check(name, None, TOL_CACHE, True, note="not applicable: an encoder has no KV cache"))
    else:
        rep = cache_report(lm, inputs)
        checks.append(Check("cache_vs_no_cache_logits", rep["max_abs_logits"], rep["tolerance"],
                            rep["max_abs_logits"] <= rep["tolerance"],
                            note=f"tolerance {TOL_CACHE:g}·max(1, max|logits|)"))
        checks.append(Check("cache_vs_no_cache_pattern", rep["max_abs_pattern"], TOL_CACHE,
                            rep["max_abs_pattern"] <= TOL_CACHE))
        g = greedy_report(lm, inputs)
        checks.append(Check("greedy_cache_tokens_equal", float(g["n_different"]), 0.0, g["equal"]))
    return {"passed": all(c.passed for c in checks), "checks": [c.to_dict() for c in checks]}
