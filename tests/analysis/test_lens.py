"""The logit lens: the last row is the model's own prediction exactly; the answer's probability per row."""

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.lens import logit_lens, rows_logits
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.analysis.interp_models import STORY, tiny_llama


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


@pytest.mark.parametrize("name", ["lecture-decoder", "random-decoder", "random-encdec", "random-encoder", "llama"])
def test_last_row_is_the_models_own_prediction_exactly(name, lecture):
    lm = {"lecture-decoder": lecture, "llama": None}.get(name) or (tiny_llama() if name == "llama" else load(name))
    text, src = ("ab", "hello") if lm.arch == "encdec" else ("the cat sat", None)
    ro, resid, logits = rows_logits(lm, lm.encode(text, src))
    with torch.no_grad():
        last = ro.logits(resid[-1])
    assert torch.equal(last, logits), "the final stream through the final norm and unembedding is the output"
    lens = logit_lens(lm, text, src_text=src, k=3)
    run = lm.run(text, src, top_k=3)
    np.testing.assert_array_equal(lens.top_ids[-1], run.top_ids)
    assert len(lens.rows) == ro.n_blocks + 1 == len(ro.stack.blocks) + 1 and lens.rows[0] == "embed"
    assert lens.top_probs.shape == (ro.n_blocks + 1, len(run.tokens), 3)


def test_answer_probability_per_row_on_the_retrieval_story(lecture):
    lens = logit_lens(lecture, STORY, "rabbit")
    p_model = torch.softmax(lecture.forward(lecture.encode(STORY)).logits[0, -1], -1)
    assert lens.answer == "rabbit" and lens.answer_id == lecture.single_token_id("rabbit")
    assert lens.answer_probs[-1, -1] == pytest.approx(float(p_model[lens.answer_id]), abs=1e-6)
    assert lens.answer_ranks[-1, -1] == 0 and lens.top_tokens[-1][-1][0] == "rabbit"
    assert lens.answer_probs[0, -1] < 1e-3, "the embeddings alone do not know the pet"
    js = lens.to_json()
    assert js["answer"]["rank_last"][-1] == 0 and len(js["top"]) == 5 and js["top"][-1][-1][0]["token"] == "rabbit"
    assert logit_lens(lecture, STORY, "rabbit", layer=2).to_json(2)["rows"] == ["L1"]


@pytest.mark.parametrize("kw, msg", [
    (dict(answer="rabbit turtle"), "is 2 tokens"),
    (dict(answer=""), "must be one token"),
    # a 4-layer model: its rows, not its layers, are 0–4 (the message said "this model has layers 0–4")
    (dict(layer=5), "^layer 5 is out of range: the lens has rows 0–4$"),
    (dict(layer=-6), "out of range"),
])
def test_bad_input_is_one_line(lecture, kw, msg):
    with pytest.raises(InputError, match=msg) as e:
        logit_lens(lecture, STORY, **kw)
    assert "\n" not in str(e.value)


def test_a_model_without_a_token_head_says_so():
    with pytest.raises(InputError, match="vision transformer"):
        logit_lens(load("lecture-vit"), "x")
