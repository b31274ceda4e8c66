"""analysis.checks: `run_checks` is the named checks in order, each with the same numbers on its own."""

from __future__ import annotations

import pytest

from analysis.checks import (
    FUSED,
    check_backend,
    check_greedy_cache,
    check_invariants,
    check_kv_cache,
    run_checks,
)
from model.registry import load

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
