"""The refusal of a forward pass that would pass the memory budget names a backend only where the caller can pick
one (model.budget.backend_choice): the Python API says backend='sdpa', a command with --backend says
--backend sdpa, a command or page without a choice only the tokens that fit."""

from __future__ import annotations

import re

import pytest
import torch
from attnlab.model import budget
from attnlab.model.inputs import InputError

from tests.model.test_budget import SMOL

T = 4423  # SmolLM2's tokens of a 20,000-character text: eager needs ~67.6 GB, sdpa ~2.2 GB


@pytest.fixture
def fits_sdpa_only(monkeypatch):
    """A budget with 5 GB left above what this process holds: sdpa's run fits, eager's does not."""
    monkeypatch.setattr(budget, "rss_bytes", lambda: 1_000_000_000)
    monkeypatch.setattr(budget, "available_bytes", lambda device=None: 100 * 10**9)
    old = budget.set_budget(budget.Budget(max_bytes=6 * 10**9))
    assert budget.need_bytes(SMOL, T, torch.float32, "sdpa") <= 5 * 10**9 < budget.need_bytes(SMOL, T)
    yield
    budget.set_budget(old)


def _refusal() -> str:
    with pytest.raises(InputError) as e:
        budget.check_forward("smollm2", SMOL, T, torch.float32, "eager")
    return str(e.value)


@pytest.mark.parametrize("how, hint", [
    (budget._CHOICE.get(), "run it with backend='sdpa' (lazy records, exact patterns on demand) or shorten"),
    ("--backend sdpa", "run it with --backend sdpa (lazy records, exact patterns on demand) or shorten"),
    (None, "more; shorten"),
])
def test_the_hint_names_the_backend_only_where_it_can_be_picked(fits_sdpa_only, how, hint):
    with budget.backend_choice(how):
        msg = _refusal()
    assert hint in msg and "\n" not in msg
    assert ("sdpa" in msg) == (how is not None)
    n = int(re.search(r"at most ([\d,]+) tokens$", msg).group(1).replace(",", ""))
    assert budget.need_bytes(SMOL, n) <= 5 * 10**9 < budget.need_bytes(SMOL, n + 1)  # what fits, exactly


def test_the_python_api_is_the_default_and_the_block_puts_it_back(fits_sdpa_only):
    assert "backend='sdpa'" in _refusal()
    with budget.backend_choice(None):
        assert "sdpa" not in _refusal()
    assert "backend='sdpa'" in _refusal()


def test_no_backend_hint_where_sdpa_does_not_fit_either(monkeypatch):
    monkeypatch.setattr(budget, "rss_bytes", lambda: 1_000_000_000)
    old = budget.set_budget(budget.Budget(max_bytes=2 * 10**9))  # 1 GB left: sdpa's 2.2 GB does not fit
    try:
        assert "sdpa" not in _refusal()
    finally:
        budget.set_budget(old)
