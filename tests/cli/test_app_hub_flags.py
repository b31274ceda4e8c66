"""`attnlab app --allow-hub / --no-hub` reach the app as ATTNLAB_ALLOW_HUB (read by app/hub_access.py hub_refusal)."""

from __future__ import annotations

import pytest
from attnlab.cli.main import main


@pytest.mark.parametrize("flags, want", [([], None), (["--allow-hub"], "1"), (["--no-hub"], "0")])
def test_hub_flags_reach_the_app(monkeypatch, flags, want):
    seen = {}
    monkeypatch.delenv("ATTNLAB_ALLOW_HUB", raising=False)
    monkeypatch.setattr("os.execve", lambda exe, cmd, env: seen.update(cmd=cmd, env=env))
    monkeypatch.setattr("os.chdir", lambda p: None)
    assert main(["app", "--device", "cpu", *flags]) == 0
    assert seen["env"].get("ATTNLAB_ALLOW_HUB") == want
    assert seen["cmd"][seen["cmd"].index("--server.address") + 1] == "127.0.0.1"


def test_the_two_flags_exclude_each_other(capsys):
    assert main(["app", "--allow-hub", "--no-hub"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
