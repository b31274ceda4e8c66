"""bench/costs.py's table from a section, and `attnlab bench --costs` refusing company (one line, exit 2)."""

from attnlab.bench.costs import costs_markdown
from attnlab.cli.main import main

SECTION = {"warm_start": {"fresh_warmed_s": 3.95, "warm_s": 4.39, "warm_times": [4.4, 4.39, 4.3, 4.5, 4.2],
                          "cold_s": 8.91, "warm_up_s": 3.9, "ratio": 0.9},
           "faithfulness": {"n": 100, "model": "lecture-decoder", "with_ig_s": 300.0, "without_ig_s": 60.0,
                            "ratio": 5.0},
           "loadavg_start": [5.6, 6.9, 8.4], "loadavg_end": [6.0, 6.5, 8.0]}


def test_costs_table():
    lines = costs_markdown(SECTION)
    assert lines[0] == "Server costs (`attnlab bench --costs`; load 5.6 → 6.0):"
    assert lines[4] == ("| Explore's first chart, fresh `attnlab app` server (warm start done, 3.9 s) | 3.95 | the "
                        "same, warm server (median of 5) | 4.39 | 0.90× |")
    assert lines[5].endswith("| 8.91 | warm server | 4.39 | 2.03× |")
    assert lines[6] == ("| `attnlab faithfulness --model lecture-decoder --n 100`, every method | 300.0 | without "
                        "integrated gradients (`--methods`; mean of a run before and one after) | 60.0 | 5.00× |")


def test_costs_table_of_alternating_rounds():
    f = {"n": 100, "model": "lecture-decoder", "rounds": 3, "threads": "1", "with_ig_s": 40.0, "without_ig_s": 16.0,
         "ratio": 2.5, "with_ig_cpu_s": 21.3, "without_ig_cpu_s": 8.5, "cpu_ratio": 2.506, "ig_rows": 29.98,
         "ig_max_rows": 55, "ig_max_error": 0.0069, "loadavg": [4.2, 5.1]}
    lines = costs_markdown(SECTION | {"faithfulness": f})
    assert lines[6] == ("| `attnlab faithfulness --model lecture-decoder --n 100`, every method (median of 3, "
                        "alternating; OMP_NUM_THREADS 1; load 4.2 → 5.1) | 40.0 | without integrated gradients "
                        "(`--methods`; median of 3, alternating) | 16.0 | 2.50× |")
    assert lines[7] == ("| the same, CPU seconds (user + sys); integrated gradients 30.0 gradient rows an example (at "
                        "most 55), completeness error ≤ 0.69% | 21.3 | without, CPU seconds | 8.5 | 2.51× |")
    assert lines[8] == ""


def test_costs_runs_alone(capsys):
    assert main(["bench", "--costs", "--browser"]) == 2
    assert capsys.readouterr().err == "attnlab: error: --costs runs alone (not with --browser or --class)\n"
    assert main(["bench", "--costs", "faithfulness", "--class"]) == 2
    assert capsys.readouterr().err == "attnlab: error: --costs runs alone (not with --browser or --class)\n"


def test_faithfulness_cost_runs_both_commands_alternately(monkeypatch):
    from attnlab.bench.costs import faithfulness_cost

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    said = []
    f = faithfulness_cost(n=2, rounds=2, progress=said.append)
    assert [s.split(":")[0] for s in said] == [
        "faithfulness --n 2 without integrated gradients", "faithfulness --n 2 with integrated gradients",
        "faithfulness --n 2 with integrated gradients", "faithfulness --n 2 without integrated gradients"]
    assert len(f["with_ig_times"]) == len(f["without_ig_cpu_times"]) == 2 and f["threads"] == "1"
    assert f["ratio"] == round(f["with_ig_s"] / f["without_ig_s"], 3) and min(f["with_ig_cpu_times"]) > 0
    assert 9 <= f["ig_rows"] <= f["ig_max_rows"] <= 513 and f["ig_max_error"] <= 0.01
    assert f["command"].endswith("[--methods last_layer,head_mean,rollout,flow,attention_norm,value_zeroing,relevance,"
                                 "input_x_gradient,attention_x_gradient]")
