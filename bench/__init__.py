"""The `attnlab bench` measurements: forward time and peak memory of each capture mode, lazy-capture
costs on long inputs, and the issue's targets. Jobs run in their own processes (`worker`); `runner`
schedules them and writes the tables; the bounded-memory overview and rollout live in `analysis.longinput`."""

from analysis.bench.runner import LENGTHS, MODES, QUICK_LENGTHS, evaluate_targets, markdown, run_benchmark

__all__ = ["LENGTHS", "MODES", "QUICK_LENGTHS", "evaluate_targets", "markdown", "run_benchmark"]
