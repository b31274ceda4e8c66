"""`attnlab lens` and `attnlab patch`: JSON contracts on the lecture decoder's retrieval story, bad input as one
line with exit 2."""

import json

import pytest
from attnlab.cli.main import main

from tests.analysis.interp_models import CORRUPT, STORY


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_lens_json_last_row_and_dla(capsys):
    rc, out, _ = run_cli(capsys, "lens", "--model", "lecture-decoder", "--text", STORY, "--answer", "rabbit",
                         "--wrong", "turtle", "--json")
    js = json.loads(out)
    assert rc == 0 and js["rows"] == ["embed", "L0", "L1", "L2", "L3"] and len(js["tokens"]) == 34
    assert js["top"][-1][-1][0]["token"] == "rabbit" and js["answer"]["rank_last"][-1] == 0
    d = js["dla"]
    assert d["wrong"] == "turtle" and d["total"] == pytest.approx(d["logit"], abs=1e-4)
    assert d["frozen_scale"]["norm"] == "LayerNorm" and len(d["heads"]) == 4 and len(d["mlps"]) == 4


def test_lens_text_and_one_row(capsys):
    rc, out, _ = run_cli(capsys, "lens", "--model", "lecture-decoder", "--text", STORY, "--layer", "4", "--top", "2")
    assert rc == 0 and "row L3, every position" in out and "'rabbit'" in out.splitlines()[-1]


def test_patch_json(capsys):
    rc, out, _ = run_cli(capsys, "patch", "--model", "lecture-decoder", "--clean", STORY, "--corrupt", CORRUPT,
                         "--answer", "rabbit", "--wrong", "turtle", "--layers", "1", "--json")
    js = json.loads(out)
    assert rc == 0 and js["all_restored"] == pytest.approx(1.0, abs=1e-5)
    assert len(js["resid"]) == 4 and len(js["resid"][0]) == 34 and len(js["heads"]) == 4
    assert list(js["head_pos"]) == ["1"] and js["head_pos"]["1"][0][-1] > 0.9
    assert js["runs"] == {"resid": 4 * 34, "heads": 16, "head_pos": 4 * 34}


@pytest.mark.parametrize("argv, message", [
    (["patch", "--clean", STORY, "--corrupt", CORRUPT + " x", "--answer", "rabbit", "--wrong", "turtle"],
     "equal lengths"),
    (["patch", "--clean", STORY, "--corrupt", CORRUPT, "--answer", "a rabbit", "--wrong", "turtle"], "2 tokens"),
    (["patch", "--clean", STORY, "--corrupt", CORRUPT, "--answer", "rabbit", "--wrong", "turtle", "--layers", "9"],
     "layer 9 is out of range"),
    (["patch", "--clean", STORY, "--corrupt", CORRUPT, "--answer", "rabbit", "--wrong", "turtle", "--layers", "x"],
     "comma-separated integers"),
    (["lens", "--text", STORY, "--layer", "7"], "layer 7 is out of range"),
    (["lens", "--text", STORY, "--answer", "best friend"], "2 tokens"),
    (["lens", "--text", STORY, "--wrong", "hen"], "--wrong needs --answer"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    rc, out, err = run_cli(capsys, argv[0], "--model", "lecture-decoder", *argv[1:])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and not out
