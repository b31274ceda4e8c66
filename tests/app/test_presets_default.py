"""The preset a fresh Explore page opens on is one its model answers correctly."""

import pytest
import torch
from attnlab.app.presets import presets
from attnlab.model.lecture.tokenizer import build_tokenizer
from attnlab.model.registry import default_model, load


def top1(name: str, text: str, row: int) -> str:
    tok = build_tokenizer()
    ids = torch.tensor([tok.encode(text).ids])
    lm = load(name)
    with torch.no_grad():
        logits = lm.model(ids).logits if lm.cfg.arch == "decoder" else lm.model(ids, attention_mask=ids > 0).logits
    return tok.id_to_token(int(logits[0, row].argmax()))


def test_the_default_model_opens_on_a_lecture_preset():
    assert default_model() == "lecture-decoder"
    first = presets("lecture-decoder")[0]
    assert first.answer and first.query_index is not None


@pytest.mark.parametrize("name", ["lecture-decoder", "lecture-encoder"])
def test_first_preset_answer_is_the_models_top1(name):
    first = presets(name)[0]  # what Explore shows when this model is picked (`_apply_preset`)
    assert top1(name, first.text, first.query_index) == first.answer, (name, first.id)


def test_the_default_preset_is_the_first_lectures_story_answered():
    first = presets("lecture-decoder")[0]
    assert first.id == "decoder-story-1" and first.answer == "48"
    assert top1("lecture-decoder", first.text, first.query_index) == "48"


def test_a_borrowing_model_is_offered_only_samples_of_tasks_it_was_trained_on():
    import json

    from attnlab.model.registry import BUNDLED_DIR

    mix = json.loads((BUNDLED_DIR / "lecture-moe" / "config.json").read_text())["training"]["mix"]
    got = presets("lecture-moe")
    assert got and {p.id.split("-")[1] for p in got} == set(mix)  # decoder-<task>-n: no story
    assert top1("lecture-moe", got[0].text, got[0].query_index) == got[0].answer
