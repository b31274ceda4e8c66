"""`attnlab circuit`: the JSON contract on lecture-decoder's retrieval story (the fact changed), the text report,
and bad input as one line with exit 2."""

import json

import pytest
from attnlab.app.circuit_examples import RETRIEVAL
from attnlab.cli.main import COMMANDS, main

BASE = ["--model", "lecture-decoder", "--clean", RETRIEVAL.clean, "--corrupt", RETRIEVAL.corrupt]


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("method", ["eap", "eap-ig", "eap-ig-act"])
def test_circuit_json(capsys, method):
    rc, out, _ = run_cli(capsys, "circuit", *BASE, "--answer", "rabbit", "--wrong", "hawk", "--method", method,
                         "--edges", "23", "--json")
    js = json.loads(out)
    assert rc == 0 and "circuit" in COMMANDS
    assert js["n_edges_total"] == 479 and len(js["edges"]) == 23 and js["method"] == method
    assert js["faithfulness"] >= 0.8  # measured 0.965 (each method)
    assert js["steps"] == {"eap": 1, "eap-ig": 10, "eap-ig-act": 2}[method]
    assert set(js["edges"][0]) == {"from", "to", "score"}
    scores = [abs(e["score"]) for e in js["edges"]]
    assert scores == sorted(scores, reverse=True)
    assert len(js["heads"]) == 16 and "blocks.3.attn.head.1" in js["heads"]
    names = {e["from"] for e in js["edges"]} | {e["to"] for e in js["edges"]}
    assert "logits" in names and all(n == "embed" or n == "logits" or n.startswith("blocks.") for n in names)


def test_circuit_text_activation_paths(capsys):
    rc, out, _ = run_cli(capsys, "circuit", *BASE, "--answer", "rabbit", "--wrong", "hawk", "--method", "eap-ig-act",
                         "--steps", "3")
    assert rc == 0 and "eap-ig-act (3 gradients per group) over 479 edges" in out


def test_circuit_text_default_size(capsys):
    rc, out, _ = run_cli(capsys, "circuit", *BASE, "--answer", "rabbit", "--wrong", "hawk")
    assert rc == 0 and "eap-ig (10 gradients) over 479 edges" in out
    assert "the circuit of the top 23 edges keeps 96." in out  # 5 % of 479, rounded down


@pytest.mark.parametrize("extra, message", [
    (["--corrupt", RETRIEVAL.corrupt + " x", "--answer", "rabbit", "--wrong", "hawk"], "equal lengths"),
    (["--answer", "a rabbit", "--wrong", "hawk"], "2 tokens"),
    (["--answer", "rabbit", "--wrong", "rabbit"], "same token"),
    (["--answer", "rabbit", "--wrong", "hawk", "--edges", "9999"], "out of range"),
    (["--answer", "rabbit", "--wrong", "hawk", "--edges", "-1"], "--edges must be 0 or more"),
    (["--answer", "rabbit", "--wrong", "hawk", "--steps", "0"], "1–100 steps"),
    (["--answer", "rabbit", "--wrong", "hawk", "--method", "acdc"], "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(capsys, extra, message):
    rc, out, err = run_cli(capsys, "circuit", *BASE, *extra)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and not out


def test_an_encoder_is_one_line(capsys):
    rc, _, err = run_cli(capsys, "circuit", "--model", "lecture-encoder", "--clean", "a", "--corrupt", "b",
                         "--answer", "is", "--wrong", "are")
    assert rc == 2 and "circuit discovery runs converted decoder-only models" in err
