"""A preset that names its query and source by word points at those tokens whatever the tokenizer's indices."""

from attnlab.app.presets import default_query, presets, source_index
from attnlab.model.registry import load


def test_minilm_it_preset_asks_about_it_and_points_at_animal():
    (p,) = [p for p in presets("minilm") if p.id == "minilm-it"]
    run = load("minilm").run(p.text)
    assert run.tokens[0] == "[CLS]" and run.tokens[-1] == "[SEP]"
    assert run.tokens[default_query(run, p)] == "it" and run.tokens[source_index(run, p)] == "animal"


def test_a_tokenizer_that_splits_the_word_falls_back_to_the_last_token():
    (p,) = [p for p in presets("random-encoder") if p.id == "minilm-it"]
    run = load("random-encoder").run(p.text)  # bytes: "it" is two tokens
    assert default_query(run, p) == len(run.tokens) - 1 and source_index(run, p) is None
