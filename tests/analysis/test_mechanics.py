"""analysis.mechanics: what is left of it, the reader of `attnlab bench` JSON."""

from __future__ import annotations

import json

from analysis import mechanics as M


def test_read_benchmarks(tmp_path):
    assert M.read_benchmarks([tmp_path / "none.json"]) is None
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"machine": "x", "results": [
        {"model": "gpt2", "mode": "fused", "T": 128, "median_s": 0.5, "peak_mb": 100.0},
        {"model": "gpt2", "mode": "eager_capture", "seq_len": 1024, "median_ms": 1500, "peak_bytes": 2**21}]}))
    got = M.read_benchmarks([p])
    assert got["machine"] == "x"
    assert got["rows"] == [
        {"model": "gpt2", "mode": "fused", "T": 128, "median_s": 0.5, "peak_mb": 100.0, "series": "gpt2 · fused"},
        {"model": "gpt2", "mode": "eager_capture", "T": 1024, "median_s": 1.5, "peak_mb": 2.0,
         "series": "gpt2 · eager_capture"}]
    # the layout `attnlab bench --json` writes: results rows with time_s and peak bytes; skipped rows have no time
    p.write_text(json.dumps({"schema": 1, "machine": {"cpu": "x"}, "lazy": [{"model": "m", "T": 128, "time_s": 1.0}],
                             "results": [{"model": "m", "T": 128, "mode": "fused", "time_s": 0.25, "times_s": [0.25],
                                          "peak_above_baseline_bytes": 3 * 2**20, "peak_rss_bytes": 2**30},
                                         {"model": "m", "T": 4096, "mode": "eager_capture", "skipped": "too big"}]}))
    assert [(r["mode"], r["T"], r["median_s"], r["peak_mb"]) for r in M.read_benchmarks([p])["rows"]] == [
        ("fused", 128, 0.25, 3.0)]
    p.write_text("{not json")
    assert M.read_benchmarks([p])["rows"] == []
