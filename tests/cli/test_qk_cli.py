"""`attnlab qk`: the JSON contract on the lecture decoder's story (terms sorted by |value|, summing to the score),
the table, and bad input as one line with exit 2."""

import json

import pytest
from attnlab.cli.main import main

from attnlab.data import data_folder

STORY = json.loads((data_folder("sample_texts") / "lecture.json").read_text())["samples"][0]["text"]
ARGS = ["qk", "--model", "lecture-decoder", "--text", STORY, "--layer", "3", "--head", "2", "--query", "63"]


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_qk_json(capsys):
    rc, out, _ = run_cli(capsys, *ARGS, "--key", "25", "--json")
    js = json.loads(out)
    assert rc == 0 and js["key_token"] == "48" and js["query_token"] == "is" and js["weight"] > 0.99
    terms = js["terms"]
    assert len(terms) == 21 * 21 and set(terms[0]) == {"query_side", "key_side", "value"}
    assert [abs(t["value"]) for t in terms] == sorted((abs(t["value"]) for t in terms), reverse=True)
    assert js["score"] - sum(t["value"] for t in terms) == pytest.approx(js["residual"], abs=1e-5)
    assert abs(js["residual"]) <= 1e-5 and js["score"] == pytest.approx(26.0619, abs=1e-3)
    assert {t["query_side"] for t in terms} >= {"embed", "blocks.1.attn.head.2", "blocks.1.attn.bias", "blocks.0.mlp",
                                                "ln_bias", "q_bias"}
    assert "k_bias" in {t["key_side"] for t in terms}
    assert sum(js["by_key_side"].values()) == pytest.approx(js["score"], abs=1e-4)


def test_qk_top_and_default_key(capsys):
    rc, out, _ = run_cli(capsys, *ARGS, "--top", "4", "--json")
    js = json.loads(out)
    assert rc == 0 and js["key"] == 25 and len(js["terms"]) == 4  # the default key: the argmax of the row
    assert js["score"] == pytest.approx(sum(t["value"] for t in js["terms"]) + js["rest"] + js["residual"], abs=1e-5)


def test_qk_table(capsys):
    rc, out, _ = run_cli(capsys, *ARGS, "--key", "25", "--top", "3")
    lines = out.splitlines()
    assert rc == 0 and "query 63 'is' → key 25 '48'" in lines[0] and "score 26.06" in lines[1]
    assert len([ln for ln in lines if ln.startswith("  blocks.") or ln.startswith("  embed")]) == 3
    assert "frozen" in lines[-1]


@pytest.mark.parametrize("extra, message", [
    (["--layer", "4"], "layer 4 is out of range"), (["--head", "-1"], "head -1 is out of range"),
    (["--key", "64"], "key 64 is out of range"), (["--top", "0"], "--top must be ≥ 1"),
])
def test_qk_bad_input_is_one_line(capsys, extra, message):
    argv = list(ARGS)
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and out == "" and message in err and err.count("\n") == 1


def test_qk_refuses_an_encoder_decoder(capsys):
    rc, _, err = run_cli(capsys, "qk", "--model", "lecture-encdec", "--text", "x", "--layer", "0", "--head", "0",
                         "--query", "0")
    assert rc == 2 and "is an encoder–decoder" in err and err.count("\n") == 1
