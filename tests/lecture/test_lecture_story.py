"""The first lecture's own story: its generator, extra questions, bridge hints, the grown vocabulary, its eval."""

from dataclasses import replace
from random import Random

import torch
from attnlab.lecture.batches import Batcher, denser
from attnlab.lecture.evaluate import evaluate
from attnlab.lecture.train import RECIPES, SPECIALS, grow_vocab, train
from attnlab.model.checkpoint import save_folder
from attnlab.model.lecture import generate, vocabulary
from attnlab.model.lecture.tasks_story import FIRST_LEN, STORY_LEN, ask_more_story, facts, solve_story
from attnlab.model.lecture.tokenizer import build_tokenizer, unknown_words
from attnlab.model.moe import upcycle
from attnlab.model.registry import load_attnlab_folder
from attnlab.model.tokenizer import HFTokenizer
from attnlab.model.transformer import build_model

LECTURE = ("alex has a friend called john . he is 46 years of age . alex has a best friend named mary . "
           "she is 48 years young . alex has a bunch of orange cats who bully him . they are 2 or 3 years old . "
           "how old is the best friend of alex ? the age of his best friend is")


def test_the_lectures_own_words_are_known_and_answered_48():
    tok = build_tokenizer()
    assert unknown_words(LECTURE, tok) == []
    tokens = tok.encode(LECTURE).tokens
    assert solve_story(tokens) == ("48", tokens.index("48"))
    best, ages = facts(tokens)
    assert best == {"alex": ("mary", tokens.index("mary"))}
    assert ages == {"john": ("46", tokens.index("46")), "mary": ("48", tokens.index("48"))}
    assert len(tokens) + 1 <= FIRST_LEN  # the held-out template holds the lecture's story


def test_question_kinds_and_first_stage_stories():
    kinds = {}
    for e in generate("story", 400, 2):
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
        numbers = [t for t in e.tokens[:-1] if t.isdigit()]
        assert len(numbers) == len(set(numbers))  # every number stated once
        assert e.tokens[-1] in (numbers if e.kind != "bridge" else e.tokens[:-1])
    assert set(kinds) == {"best", "bridge", "named", "self"} and kinds["best"] > 150  # weight 3 of 6
    recipe = replace(RECIPES["lecture-decoder"], questions=4, cfg=replace(RECIPES["lecture-decoder"].cfg, max_len=96))
    first = list(denser(generate("story", 200, 3), recipe, Random(0), one_hop=True))
    assert first and not any(e.kind == "best" or e.support_positions for e in first)  # no second hop yet


def test_ask_more_story_answers_each_question_from_the_story():
    rng, grew = Random(0), 0
    for ex in generate("story", 150, 4):
        more = ask_more_story(ex, rng, 3, STORY_LEN)
        assert more.tokens[: len(ex.tokens)] == ex.tokens and len(more.tokens) <= STORY_LEN
        grew += len(more.answer_positions) > 1
        end = ex.tokens.index("?")
        story = list(ex.tokens[: max(i for i in range(end) if ex.tokens[i] == ".") + 1])
        bridges = iter(more.support_positions)
        for a, s in zip(more.answer_positions, more.source_positions):
            start = max(i for i in range(a) if more.tokens[i] == "." and (i < a - 1)) + 1
            question = list(more.tokens[start:a])
            assert solve_story(story + question) == (more.tokens[a], s)
            if question[:4] == ["how", "old", "is", "the"]:  # two hops: the bridge names the best friend
                b = next(bridges)
                assert more.tokens[b + 2] in ("he", "she") and more.tokens[b + 4] == more.tokens[a]
        assert next(bridges, None) is None
    assert grew > 50


def test_bridge_hints_point_each_two_hop_answer_at_its_bridge():
    examples = generate("story", 40, 5, objective="causal") + generate("retrieval", 40, 5)
    b = Batcher("decoder", ("story", "story-bridge", "retrieval", "retrieval-bridge"))
    hints = b(examples, Random(0))["hint"]
    for task, number in (("story", 1), ("retrieval", 3)):
        rows = hints[hints[:, 3] == number].tolist()
        two_hop = [(i, e) for i, e in enumerate(examples) if e.task == task and e.support_positions]
        assert len(rows) == len(two_hop) > 5
        for (i, q, key, _), (j, e) in zip(rows, two_hop):
            assert (i, q, key) == (j, e.answer_positions[0] - 1, e.support_positions[0])


def test_owner_and_asker_hints_bind_each_best_friend_to_its_owner_and_each_question_to_its_name():
    examples = [ask_more_story(e, Random(i), 3, STORY_LEN) for i, e in enumerate(generate("story", 60, 6))]
    hints = Batcher("decoder", ("story", "story-owner", "story-asker"))(examples, Random(0))["hint"]
    owner, asker = hints[hints[:, 3] == 1].tolist(), hints[hints[:, 3] == 2].tolist()
    for i, n, p, _ in owner:  # "p has a best friend named/called n ."
        t = examples[i].tokens
        assert t[p + 1: p + 5] == ("has", "a", "best", "friend") and t[n + 1] == "." and facts(list(t))[0][t[p]][0] == t[n]
    assert len(owner) == sum(len(facts(list(e.tokens))[0]) for e in examples) > 60  # two owners in some stories
    for i, q, x, _ in asker:  # the answer's query row → the name after "friend of"
        t = examples[i].tokens
        assert t[x - 2: x] == ("friend", "of") and t[x + 1] == "?" and q + 1 in examples[i].answer_positions
    asked = sum(1 for e in examples for a in e.answer_positions
                if "friend" in e.tokens[max(j for j in range(a) if e.tokens[j] == "?") - 3:a])
    assert len(asker) == asked > 40


def test_grow_vocab_keeps_the_old_rows_and_the_old_checkpoint_still_evaluates(tmp_path):
    """A checkpoint of the first corpus's 186 words (as the bundled models were before round three) grows."""
    old_words = vocabulary(story=False)
    old_cfg = replace(RECIPES["lecture-decoder"].cfg, vocab_size=len(old_words))
    torch.manual_seed(1)
    save_folder(build_model(old_cfg), old_cfg, tmp_path, tokenizer=HFTokenizer(build_tokenizer(old_words)),
                specials=SPECIALS)
    old = load_attnlab_folder(tmp_path, "old-decoder", str(tmp_path))
    assert old.cfg.vocab_size == 186 == len(old_words)
    cfg = replace(RECIPES["lecture-decoder"].cfg, max_len=old.cfg.max_len)
    torch.manual_seed(0)
    model = build_model(cfg)
    state = grow_vocab(model, old.model.state_dict())
    model.load_state_dict(state)
    emb = model.embed.tok.weight
    assert emb.shape == (322, 128) and torch.equal(emb[:186], old.model.embed.tok.weight)
    moe = build_model(RECIPES["lecture-moe"].cfg)  # lecture-moe starts from the decoder: rows kept through upcycling
    moe.load_state_dict(upcycle(moe, grow_vocab(moe, old.model.state_dict())))
    assert torch.equal(moe.embed.tok.weight[:186], old.model.embed.tok.weight)
    report = evaluate(old, 40, seed=3)["tasks"]
    assert set(report) == {"retrieval", "induction", "agreement"}  # no story: its words are not in that vocabulary


def test_a_decoder_with_the_story_words_is_scored_on_stories():
    recipe = replace(RECIPES["lecture-decoder"], steps=2, batch=4, cfg=replace(RECIPES["lecture-decoder"].cfg,
                     d_model=32, n_layers=1, n_heads=2, max_len=96), mix={"story": 1.0})
    res = train(recipe, progress=False)
    assert len(res.losses) == 2 and all(torch.isfinite(torch.tensor(res.losses)))

    from attnlab.model.capabilities import ModelKind

    class LM(ModelKind):  # the loaded-model surface evaluate() reads: its kind (lm.objective, …) from the config
        cfg, model, arch = recipe.cfg, res.model, recipe.cfg.arch
        tokenizer = build_tokenizer()

    report = evaluate(LM(), 8, seed=1, detail=True)["tasks"]
    assert report["story"]["n"] == 4 and set(report["story"]["kinds"]) <= {"best", "bridge", "named", "self"}


def test_curve_point_keeps_the_story_two_hop_apart():
    from attnlab.lecture.train_command import curve_point

    metrics = {"tasks": {"story": {"n": 4, "accuracy": 0.5, "kinds": {"best": {"n": 2, "accuracy": 0.25},
                                                                      "bridge": {"n": 2, "accuracy": 0.75}}}}}
    assert curve_point(metrics) == {"story": 0.5, "story best friend": 0.25}
