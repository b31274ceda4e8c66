"""The lecture models read text as people type it: lower-cased, each punctuation mark a token of its own, so the
first lecture's story pasted from the slide is the preset's tokens and lecture-decoder answers 48; the special
tokens stay as typed; a word outside the vocabulary is named with its nearest known word."""

from __future__ import annotations

import json

import pytest
from attnlab.app.presets import presets
from attnlab.model.lecture.tokenizer import build_tokenizer, unknown_words
from attnlab.model.registry import load
from attnlab.model.tokenizer import edit_distance, nearest_word

from attnlab.data import data_folder

SLIDE = ("Alex has a friend called John. He is 46 years of age. Alex has a best friend named Mary. She is 48 years "
         "young. Alex has a bunch of orange cats who bully him. They are 2 or 3 years old. How old is the best friend "
         "of Alex? The age of his best friend is")


@pytest.fixture(scope="module")
def dec():
    return load("lecture-decoder")


def test_the_slides_story_is_the_presets_tokens_and_answers_48(dec):
    (p,) = [p for p in presets("lecture-decoder") if p.answer == "48" and p.text.startswith("alex has a friend")]
    typed, preset = dec.encode(SLIDE), dec.encode(p.text)
    ids = typed.ids[0].tolist()
    assert ids == preset.ids[0].tolist() and len(ids) == 64  # [BOS] + 63 words and marks
    assert ids[:9] == [2, 286, 74, 14, 63, 292, 300, 8, 295]  # [BOS] alex has a friend called john . he
    assert typed.tokens[1] == "Alex" and typed.tokens[7] == "."  # labels show the text as typed
    assert typed.tokens[preset.tokens.index("?") - 1] == "Alex"
    run = dec.run(SLIDE)
    assert run.top_tokens[-1][0] == "48" and run.top_probs[-1][0] > 0.99


def test_case_punctuation_and_specials():
    tok = build_tokenizer()
    assert tok.encode("How old is ALVO?[MASK]").tokens == ["[BOS]", "how", "old", "is", "alvo", "?", "[MASK]"]
    assert tok.encode("( [ ] ).").tokens == ["[BOS]", "(", "[", "]", ")", "."]
    assert tok.encode("[mask]").tokens == ["[BOS]", "[", "[UNK]", "]"]  # specials only as typed in capitals
    assert unknown_words("John's cat, Mary!", tok) == ["'", "s", ",", "!"]


def test_the_bundled_tokenizers_read_as_build_tokenizer_does():
    """One place decides how text is read: every bundled word-level tokenizer has build_tokenizer's settings."""
    want = json.loads(build_tokenizer().to_str())
    for name in ("lecture-decoder", "lecture-encoder", "lecture-encdec", "lecture-moe"):
        got = json.loads((data_folder("model.lecture") / "checkpoints" / name / "tokenizer.json").read_text())
        assert got["normalizer"] == want["normalizer"] == {"type": "Lowercase"}, name
        assert got["pre_tokenizer"] == want["pre_tokenizer"], name
        assert got["model"]["vocab"] == want["model"]["vocab"], name


def test_edit_distance_and_the_nearest_word():
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3 == edit_distance("abc", "")
    assert edit_distance("jonh", "john") == 1 and edit_distance("mary", "mary") == 0  # a swap is one edit
    assert nearest_word("Jonh", ["alex", "joan", "john"]) == "john"
    assert nearest_word("marry", ["harry", "mary"]) == "mary"  # a tie: the same first letter wins
    assert nearest_word("zz", ["ab", "aa"]) == "aa" and nearest_word("x", []) is None
