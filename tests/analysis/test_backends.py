"""analysis.backends: live kernel timings and peak memory."""

from __future__ import annotations

from analysis import backends as B


def test_time_attention_rows_and_memory():
    rows = B.time_attention((32, 64), n_heads=2, d_head=8, repeats=2, budget_s=0.0)
    assert [(r["T"], r["backend"]) for r in rows] == [(t, b) for t in (32, 64) for b in ("eager", "sdpa", "flash")]
    by = {(r["T"], r["backend"]): r for r in rows}
    assert all(r["ms"] > 0 and r["runs"] >= 2 for r in rows)
    assert by[(64, "eager")]["peak_bytes"] >= by[(64, "eager")]["matrix_bytes"]  # eager holds the T×T matrix
    assert by[(64, "flash")]["peak_bytes"] < by[(64, "eager")]["matrix_bytes"]
