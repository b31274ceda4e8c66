"""The preset a fresh Explore page opens on is one its model answers correctly."""

import pytest
import torch

from app.presets import presets
from model.lecture.tokenizer import build_tokenizer
from model.registry import default_model, load


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
