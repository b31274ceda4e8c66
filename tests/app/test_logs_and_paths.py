"""What the server writes and shows for ordinary trouble: one log line for an input error (a traceback only for
a real fault), and no server file path on a page."""

from __future__ import annotations

import json
import logging

import pytest
from attnlab.app import mechanics, state
from attnlab.app.frame import show_error
from attnlab.model.inputs import InputError
from attnlab.model.transformer import ContextLengthError


@pytest.mark.parametrize("error", [InputError("the text is empty; type or choose some text"),
                                   ContextLengthError("the text has 600 tokens; the model reads at most 512"),
                                   state.BusyError("The server is busy")])
def test_an_input_error_is_one_log_line(caplog, error):
    with caplog.at_level(logging.INFO, logger="attnlab.app"):
        try:
            raise error
        except Exception as e:  # noqa: BLE001
            show_error(e)
    (rec,) = [r for r in caplog.records if r.name == "attnlab.app"]
    assert rec.getMessage() == f"input refused: {type(error).__name__}: {error}" and rec.levelno == logging.WARNING
    assert "Traceback" not in caplog.text and "\n" not in rec.getMessage()


def test_a_program_fault_keeps_its_traceback(caplog):
    with caplog.at_level(logging.INFO, logger="attnlab.app"):
        try:
            raise RuntimeError("boom")
        except Exception as e:  # noqa: BLE001
            show_error(e)
    assert "Traceback" in caplog.text and "RuntimeError: boom" in caplog.text


def test_benchmark_results_name_the_file_in_the_repository_not_the_server(tmp_path, monkeypatch):
    bench = tmp_path / "srv" / "benchmarks.json"
    bench.parent.mkdir()
    bench.write_text(json.dumps({"schema": "attnlab-bench/1", "machine": {"cpu": "c"}, "results": [
        {"model": "gpt2-small", "T": 1024, "mode": "fused", "time_s": 0.5, "peak_above_baseline_bytes": 2**27}]}))
    monkeypatch.setattr(mechanics, "BENCH_FILE", bench)
    mechanics.benchmark_results.clear()
    try:
        out = mechanics.benchmark_results()
        assert out["path"] == "docs/benchmarks.json" and str(tmp_path) not in json.dumps(out, default=str)
    finally:
        mechanics.benchmark_results.clear()
