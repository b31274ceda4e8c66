"""`attnlab sinks`: the JSON keys and numbers (the analysis' own), --texts files, the window test's refusals, and bad
input as one line with exit 2."""

import json

import numpy as np
import pytest
from attnlab.analysis.machinery.window_ppl import window_test
from attnlab.analysis.probes.sinks import measure_sinks
from attnlab.cli.main import main
from attnlab.model.registry import load

from tests.view.fixtures import make_view_model


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_is_the_analysis(capsys):
    rc, out, _ = run_cli(capsys, "sinks", "--model", "lecture-decoder", "--json")
    js = json.loads(out)
    lm = load("lecture-decoder")
    r, w = measure_sinks(lm), window_test(lm).to_json()
    assert rc == 0 and js["note"] is None
    assert js["per_layer"] == pytest.approx(r.per_layer.tolist(), abs=1e-12) and len(js["per_layer"]) == 4
    assert js["sink_heads"] == [{"layer": h["layer"], "head": h["head"], "share": pytest.approx(h["share"], abs=1e-12)}
                                for h in r.sink_heads]
    assert {"window", "with_sinks", "without_sinks", "full"} <= set(js["window_ppl"])
    assert js["window_ppl"]["window"] == 24 and js["window_ppl"]["tokens"] == 96
    for k in ("full", "with_sinks", "without_sinks", "with_sinks_cache_positions"):
        assert js["window_ppl"][k] == pytest.approx(w[k], rel=1e-12)
    assert js["norms"]["resid_first"] == pytest.approx(r.norms["resid_first"].tolist(), rel=1e-12)


def test_texts_file_window_and_text_output(capsys, tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(["the cat sat on the mat", "a dog ran in the park"]))
    rc, out, _ = run_cli(capsys, "sinks", "--model", "random-decoder", "--texts", str(f), "--window", "0", "--json")
    js = json.loads(out)
    want = measure_sinks(load("random-decoder"), ["the cat sat on the mat", "a dog ran in the park"])
    assert rc == 0 and js["texts"] == 2 and js["window_ppl"] is None and "skipped (--window 0)" in js["note"]
    np.testing.assert_allclose(js["share"], want.share, atol=1e-12)
    lines = tmp_path / "t.txt"
    lines.write_text("the cat sat on the mat\n\na dog ran in the park\n")
    rc, out, _ = run_cli(capsys, "sinks", "--model", "random-decoder", "--texts", str(lines), "--window", "0")
    assert rc == 0 and "2 texts" in out and "layer  1  share" in out and "note: the window test was skipped" in out


def test_a_view_and_an_encoder_say_in_one_line_what_they_lack(capsys, tmp_path):
    view = str(make_view_model("gptj", tmp_path / "gptj"))
    rc, out, _ = run_cli(capsys, "sinks", "--model", view, "--json")
    js = json.loads(out)
    assert rc == 0 and js["norms"] is None and js["window_ppl"] is None and len(js["per_layer"]) == 2
    assert "runs as a transformers view: attention weights only" in js["note"] and "\n" not in js["note"]
    assert "takes no mask other than its own" in js["note"]
    rc, out, _ = run_cli(capsys, "sinks", "--model", "random-encoder", "--json")
    js = json.loads(out)
    assert rc == 0 and js["window_ppl"] is None and "does not predict the next token" in js["note"]
    assert js["norms"] is not None


@pytest.mark.parametrize("argv, msg", [
    (["--model", "lecture-decoder", "--window", "-3"], "--window must be ≥ 0"),
    (["--model", "lecture-decoder", "--window", "200"], "the window test needs more than"),
    (["--model", "random-encdec"], "encoder–decoder"),
    (["--model", "lecture-decoder", "--texts", "/nonexistent/t.json"], "no such file"),
    (["--model", "no-such-model"], "no-such-model"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, msg):
    rc, out, err = run_cli(capsys, "sinks", *argv)
    assert rc == 2 and not out and err.count("\n") == 1 and err.startswith("attnlab: error: ") and msg in err


def test_bad_texts_files(capsys, tmp_path):
    for name, body, msg in (("a.json", "{not json", "not valid JSON"), ("b.json", '{"a": 1}', "JSON list of strings"),
                            ("c.txt", "\n \n", "holds no text")):
        (tmp_path / name).write_text(body)
        rc, _, err = run_cli(capsys, "sinks", "--model", "random-decoder", "--texts", str(tmp_path / name))
        assert rc == 2 and msg in err and err.count("\n") == 1
