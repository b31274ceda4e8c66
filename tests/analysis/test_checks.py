"""attnlab.analysis.machinery.checks: `run_checks` is the named checks in order, each with the same numbers on its own."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.machinery.checks import (
    FUSED,
    check_backend,
    check_greedy_cache,
    check_invariants,
    check_kv_cache,
    run_checks,
)
from attnlab.model.registry import load

TEXT = "the cat sat on the mat"
NAMES = ["rows_sum_to_one", "no_mass_outside_mask", "finite", "eager_vs_sdpa", "eager_vs_flash",
         "cache_vs_no_cache_logits", "cache_vs_no_cache_pattern", "greedy_cache_tokens_equal"]


@pytest.mark.parametrize("model", ["random-decoder", "random-encoder"])
def test_run_checks_is_the_named_checks_in_order(model):
    lm = load(model)
    inp = lm.encode(TEXT)
    report = run_checks(lm, inp)
    parts = [check_invariants(lm, inp), *(check_backend(lm, inp, b) for b in FUSED), check_kv_cache(lm, inp),
             check_greedy_cache(lm, inp)]
    rows = [r for p in parts for r in p.rows]
    assert [r["name"] for r in report["checks"]] == (NAMES if lm.has_cache else NAMES[:-1])
    assert report["checks"] == rows  # the same values, tolerances, verdicts and notes, one check at a time
    assert report["passed"] is True and all(p.passed for p in parts)


def test_check_backend_detail_is_what_the_row_judges():
    lm = load("random-decoder")
    res = check_backend(lm, lm.encode(TEXT), "sdpa")
    (row,) = res.rows
    d = res.detail
    assert row["name"] == "eager_vs_sdpa" and row["tolerance"] == d["tolerance"]
    assert row["value"] == max(d["max_abs_logits"], d["max_abs_hidden"], d["max_abs_pattern"])
    assert set(d["per_site"]) == {"blocks.0.attn", "blocks.1.attn"} and d["max_abs_pattern"] == max(d["per_site"].values())


# -- 16-bit rules on the CPU ----------------------------------------------------------------------------------
def test_rules_per_dtype():
    import torch
    from attnlab.analysis.machinery.checks import FP32, TOL_BACKEND, rules_for

    assert rules_for(torch.float32) is FP32 and FP32.backend == TOL_BACKEND == 1e-5 and not FP32.half
    bf = rules_for(torch.bfloat16)
    assert (bf.dtype, bf.backend, bf.cache, bf.vs_eager, bf.rowsum) == ("bfloat16", 4e-2, 4e-2, 2.0, 2 ** -7)
    assert rules_for(torch.float16).rowsum == 2 ** -10


def test_bfloat16_backend_check_against_the_float32_reference():
    import torch

    lm = load("random-decoder", dtype=torch.bfloat16)
    res = check_backend(lm, lm.encode(TEXT), "sdpa")
    (row,) = res.rows
    d = res.detail
    assert row["passed"] and row["tolerance"] == 4e-2 and d["rules"]["reference"] == "float32 eager"
    assert d["reference"] == "eager" and d["scale"] < 1  # the tolerance is 4e-2 absolute here
    # bfloat16 keeps ~3 digits: outputs off by ~1e-2 from float32, far from float32's 1e-6 …
    assert 3e-3 < row["value"] <= 4e-2
    # … and the fused kernel is no worse than eager in the same dtype; both records' patterns are recomputed
    # in float32 from the bf16 q and k, so they stay near the reference's
    eager_worst = max(d["eager_error"]["max_abs_logits"], d["eager_error"]["max_abs_hidden"])
    assert 3e-3 < eager_worst < 4e-2 and d["vs_eager"] <= 2.0
    assert d["max_abs_pattern"] < 1e-3 and d["eager_error"]["max_abs_pattern"] < 1e-3


def test_bfloat16_run_checks_pass_and_report_the_rules():
    import torch

    lm = load("random-decoder", dtype=torch.bfloat16)
    report = run_checks(lm, lm.encode(TEXT))
    assert report["passed"] and (report["device"], report["dtype"]) == ("cpu", "bfloat16")
    assert report["rules"] == {"dtype": "bfloat16", "reference": "float32 eager", "backend": 4e-2,
                               "backend_vs_eager_factor": 2.0, "cache": 4e-2, "row_sum": 2 ** -7}
    rows = {c["name"]: c for c in report["checks"]}
    assert 1e-4 < rows["rows_sum_to_one"]["value"] <= 2 ** -7  # a bf16 softmax sums to 1 within one rounding
    assert rows["cache_vs_no_cache_logits"]["tolerance"] == 4e-2 and rows["greedy_cache_tokens_equal"]["value"] == 0


def test_float32_report_has_no_extra_keys():
    report = run_checks(load("random-encoder"), load("random-encoder").encode(TEXT))
    assert set(report) == {"passed", "checks"}


def test_half_precision_pattern_bound_follows_eager_error(monkeypatch):
    """A 16-bit fused backend's patterns pass within TOL_HALF, or within 2× eager's own pattern error where that is
    larger (lecture-vit's peaked bf16 patterns on an H200: fused 4.02e-2 against the 0.04 absolute bound)."""
    import torch
    from attnlab.analysis.machinery import checks

    class FakeLM:
        def reference_model(self):
            return None

    def fake(eager_pattern, fused_pattern):
        def compare(lm, inputs, backend, ref_lm=None):
            pattern = eager_pattern if backend == "eager" else fused_pattern
            return {"max_abs_logits": 0.02, "max_abs_hidden": 0.02, "max_abs_pattern": pattern,
                    "scale": np.array([1.0]), "kernels": ["flash"]}
        return compare

    rules = checks.rules_for(torch.bfloat16)
    for eager, fused, ok in [(0.03, 0.0402, True), (0.015, 0.0402, False), (0.01, 0.039, True), (0.03, 0.061, False)]:
        monkeypatch.setattr(checks, "compare_backends", fake(eager, fused))
        (c,) = checks.check_backend_half(FakeLM(), None, "flash", rules).checks
        assert c.passed is ok, (eager, fused, c.note)
        assert f"eager's {eager:.2e}" in c.note
