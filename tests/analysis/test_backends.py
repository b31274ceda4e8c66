"""attnlab.analysis.machinery.backends: live kernel timings and peak memory."""

from __future__ import annotations

from attnlab.analysis.machinery import backends as B


def test_time_attention_rows_and_memory():
    rows = B.time_attention((32, 64), n_heads=2, d_head=8, repeats=2, budget_s=0.0)
    assert [(r["T"], r["backend"]) for r in rows] == [(t, b) for t in (32, 64) for b in ("eager", "sdpa", "flash")]
    by = {(r["T"], r["backend"]): r for r in rows}
    assert all(r["ms"] > 0 and r["runs"] >= 2 for r in rows)
    assert by[(64, "eager")]["peak_bytes"] >= by[(64, "eager")]["matrix_bytes"]  # eager holds the T×T matrix
    assert by[(64, "flash")]["peak_bytes"] < by[(64, "eager")]["matrix_bytes"]


def test_memory_measure_does_not_load_the_compiler_stack():
    """The CPU peak comes from the autograd profiler: torch.profiler's wrapper imports torch._inductor and
    torch._dynamo on first use (over a second, on a page's first visit)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from attnlab.analysis.machinery import backends as B; "
            "rows = B.time_attention((32,), n_heads=2, d_head=8, repeats=1, budget_s=0.0); "
            "assert rows[0]['peak_bytes'] >= rows[0]['matrix_bytes'], rows; "
            "print(sorted(m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
