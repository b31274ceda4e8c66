"""attnlab.analysis.machinery.bench_report: the `attnlab bench` JSON's one reader, on the checked-in run and on bad files."""

import json
from pathlib import Path

import pytest
from attnlab.analysis.machinery import bench_report as B

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "docs" / "benchmarks.json"


def constants(cls) -> set[str]:
    return {v for k, v in vars(cls).items() if k.isupper()}


def test_reads_the_checked_in_bench_output():
    data = json.loads(REAL.read_text(encoding="utf-8"))
    got = B.read_benchmarks(REAL)
    assert got is not None and got["path"] == str(REAL) and got["schema"] == B.SCHEMA == data["schema"]
    assert got["machine"] == data["machine"] and got["machine"]["cpu"]
    ran = [r for r in data["results"] if "time_s" in r or "peak_above_baseline_bytes" in r]
    assert len(got["rows"]) == len(ran) > 0
    for want, row in zip(ran, got["rows"]):
        assert (row["model"], row["mode"], row["T"]) == (want["model"], want["mode"], want["T"])
        assert row["median_s"] == want.get("time_s") and row["series"] == f"{want['model']} · {want['mode']}"
        if "peak_above_baseline_bytes" in want:
            assert row["peak_mb"] == want["peak_above_baseline_bytes"] / 2**20
            assert row["peak_mb"] == pytest.approx(want["peak_mb"], abs=0.05)  # what bench wrote, rounded
        else:
            assert row["peak_mb"] is None
    fused = next(r for r in got["rows"] if (r["model"], r["mode"], r["T"]) == ("gpt2-small", "fused", 1024))
    assert fused["median_s"] == next(r["time_s"] for r in data["results"]
                                     if (r["model"], r["mode"], r["T"]) == ("gpt2-small", "fused", 1024))
    assert not any(r["mode"] == "eager_capture" and r["T"] == 4096 and r["model"] == "gpt2-small"
                   for r in got["rows"])  # skipped for memory: neither time nor peak
    assert got["payload"] == data["payload"] and got["targets"] == data["targets"]
    # the file uses no key the schema does not name
    assert set(data) <= constants(B.Top)
    assert {k for r in data["results"] for k in r} <= constants(B.Result)
    assert {k for p in data["payload"] for k in p} <= constants(B.Payload)
    assert {k for t in data["targets"] for k in t} == constants(B.Target)


def test_missing_corrupt_and_other_files_are_none(tmp_path):
    assert B.read_benchmarks(tmp_path / "none.json") is None
    assert B.read_benchmarks(tmp_path) is None  # a folder
    p = tmp_path / "b.json"
    text = REAL.read_text(encoding="utf-8")
    cases = {
        "truncated": text[: len(text) // 2],
        "not json": "{not json",
        "empty": "",
        "a list": "[1, 2]",
        "other schema": text.replace('"attnlab-bench/1"', '"attnlab-bench/2"', 1),
        "no schema (a guessed layout)": json.dumps({"machine": "x", "results": [
            {"model": "gpt2", "mode": "fused", "T": 128, "median_s": 0.5, "peak_mb": 100.0}]}),
        "results not a list": json.dumps({"schema": B.SCHEMA, "machine": {}, "results": {"fused": 1}}),
        "a row without T": json.dumps({"schema": B.SCHEMA, "machine": {}, "results": [
            {"model": "m", "mode": "fused", "time_s": 1.0}]}),
        "a time that is text": json.dumps({"schema": B.SCHEMA, "machine": {}, "results": [
            {"model": "m", "mode": "fused", "T": 8, "time_s": "1.0"}]}),
        "a payload row without bytes": json.dumps({"schema": B.SCHEMA, "machine": {}, "results": [],
                                                   "payload": [{"page": "explore", "T": 8}]}),
    }
    for what, body in cases.items():
        p.write_text(body, encoding="utf-8")
        assert B.read_benchmarks(p) is None, what
    p.write_bytes(b"\xff\xfe\x00garbage")
    assert B.read_benchmarks(p) is None


def test_rows_keep_what_ran(tmp_path):
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"schema": B.SCHEMA, "machine": {"cpu": "x"}, "results": [
        {"model": "m", "T": 128, "mode": "fused", "time_s": 0.25, "times_s": [0.25],
         "peak_above_baseline_bytes": 3 * 2**20, "peak_rss_bytes": 2**30},
        {"model": "m", "T": 128, "mode": "eager_capture", "error": "exit 1", "peak_above_baseline_bytes": 2**21},
        {"model": "m", "T": 4096, "mode": "eager_capture", "skipped": "too big"}],
        "payload": [{"page": "explore", "T": 128, "bytes": None, "error": "boom"}]}), encoding="utf-8")
    got = B.read_benchmarks(str(p))
    assert [(r["mode"], r["T"], r["median_s"], r["peak_mb"]) for r in got["rows"]] == [
        ("fused", 128, 0.25, 3.0), ("eager_capture", 128, None, 2.0)]
    assert got["payload"] == [{"page": "explore", "T": 128, "bytes": None, "error": "boom"}]
    assert got["targets"] == []
