"""Words outside a lecture model's vocabulary are named beside the token strip, each with the nearest known word;
text typed with capitals and punctuation is read without any unknown word."""

from __future__ import annotations

from tests.app.conftest import ok, open_page


def test_unknown_words_are_named_with_the_nearest_known_word():
    at = open_page("explore", model="lecture-decoder", preset="custom", text="Alex has a frend called Jonh!")
    ok(at)
    (w,) = [w.value for w in at.warning if "unknown to" in w.value]
    assert w.startswith("3 of 8 tokens of the text are unknown to **lecture-decoder**")
    assert ("Unknown: `frend` (nearest known word: `friend`), `Jonh` (nearest known word: `john`), `!`." in w)


def test_the_slides_punctuation_and_capitals_are_known_words():
    at = open_page("explore", model="lecture-decoder", preset="custom", text="How old is the best friend of Alex?")
    ok(at)
    assert not [w for w in at.warning if "unknown to" in w.value]
