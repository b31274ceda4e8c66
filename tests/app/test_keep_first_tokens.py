"""An over-long text: the refusal says the limit, and a button keeps the first tokens that fit."""

from __future__ import annotations

import pytest
from attnlab.model.inputs import OverContextError
from attnlab.model.registry import load

from tests.app.conftest import open_page


@pytest.mark.parametrize("name", ["random-decoder", "lecture-decoder", "minilm"])
def test_first_tokens_is_the_longest_start_that_fits(name):
    lm = load(name)
    words = "fenna is twelve . fenna has a parrot . " if name == "lecture-decoder" else "The cat sat on a mat. "
    text = words * (lm.context // 3)
    with pytest.raises(OverContextError) as e:
        lm.encode(text)
    assert e.value.n_tokens > lm.context == e.value.limit and e.value.what == "text" and e.value.model == name
    cut = lm.first_tokens(text)
    n = lm.encode(cut).ids.shape[1]
    assert text.startswith(cut) and n == lm.context  # these texts cut exactly at the limit
    assert lm.first_tokens(cut) == cut and lm.first_tokens("a b") == "a b"
    assert lm.encode(lm.first_tokens(text, limit=10)).ids.shape[1] == 10


def test_explore_offers_to_keep_the_first_tokens():
    lm = load("random-decoder")
    at = open_page("explore", model="random-decoder", text="ab" * lm.context)
    assert at.error and "context is" in at.error[0].value
    (button,) = [b for b in at.button if b.key == "keep_first_tokens"]
    assert button.label == f"Keep the first {lm.context:,} tokens"
    at = button.click().run()
    assert not at.error and not at.exception
    assert at.session_state["text"] == ("ab" * lm.context)[:lm.context - 1]  # [BOS] + context − 1 bytes
