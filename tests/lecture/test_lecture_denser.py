"""Training-only densifiers: more retrieval questions per story, more hidden words and closers."""

from dataclasses import replace
from itertools import islice
from random import Random

import pytest
from attnlab.lecture.batches import Batcher, denser
from attnlab.lecture.train import RECIPES
from attnlab.model.lecture import MASK, generate, model_stream
from attnlab.model.lecture.tasks_retrieval import ask_more, solve_retrieval
from attnlab.model.lecture.tasks_sequences import mask_more, solve_brackets


def test_ask_more_keeps_the_first_question_and_answers_each_from_the_story():
    rng = Random(0)
    counts = []
    for ex in generate("retrieval", 150, seed=3):
        more = ask_more(ex, rng, 5, 127)
        counts.append(len(more.answer_positions))
        assert more.tokens[: len(ex.tokens)] == ex.tokens  # the held-out format is a prefix
        assert more.answer_positions[0] == ex.answer_positions[0] and len(more.tokens) <= 127
        story = ex.tokens[: len(ex.tokens) - 1 - _qlen(ex)]  # up to the first question
        questions = []
        for a, s in zip(more.answer_positions, more.source_positions):
            start = max(len(story), max(i for i in range(a) if more.tokens[i] == ".") + 1)
            question = more.tokens[start:a]
            assert question[-1] == "?"
            assert solve_retrieval(story + question) == (more.tokens[a], s)
            questions.append(question)
        assert len(set(questions)) == len(questions)  # never the same question twice
    assert max(counts) == 6 and sum(counts) / len(counts) > 4


def _qlen(ex):
    """Words of the example's question, "?" included."""
    q = ex.tokens.index("?")
    return q - max(i for i in range(q) if ex.tokens[i] == ".")


@pytest.mark.parametrize("task", ["induction", "brackets"])
def test_mask_more_hides_more_and_keeps_every_answer_determined(task):
    rng = Random(1)
    grew = 0
    for ex in generate(task, 200, seed=5, objective="masked"):
        more = mask_more(ex, rng, 0.3)
        hidden = set(more.answer_positions)
        assert set(ex.answer_positions) <= hidden and not hidden & set(more.source_positions)
        grew += len(hidden) > len(ex.answer_positions)
        for a, s in zip(more.answer_positions, more.source_positions):
            if task == "induction":
                assert more.tokens[a] == more.tokens[s] and a - 1 not in hidden - set(ex.answer_positions)
            else:
                # a [MASK] can only be a closer: read every one as ")" and the matching is unchanged
                assert solve_brackets([")" if t == MASK else t for t in more.masked_tokens], a)[1] == s
    assert grew > 100


def test_mask_more_leaves_other_tasks_and_causal_examples_alone():
    for ex in generate("induction", 5, seed=0) + generate("agreement", 5, seed=0, objective="masked"):
        assert mask_more(ex, Random(0)) is ex


def test_denser_stream_fits_the_context_and_batches():
    for name in ("lecture-decoder", "lecture-encoder"):
        base = RECIPES[name]  # the options as `attnlab train --questions 6 --mask-share 0.3 --context 128` sets them
        recipe = replace(base, questions=6, mask_share=0.3, cfg=replace(base.cfg, max_len=128))
        examples = list(islice(denser(model_stream(recipe.corpus, 0), recipe, Random(0)), 64))
        assert all(len(ex.tokens) <= recipe.cfg.max_len - 1 for ex in examples)
        retrieval = [ex for ex in examples if ex.task == "retrieval"]
        assert max(len(ex.answer_positions) for ex in retrieval) == recipe.questions
        batch = Batcher(recipe.corpus)(examples, Random(0))
        assert batch["x"].shape[1] <= recipe.cfg.max_len
        answers = sum(len(ex.answer_positions) for ex in examples)
        assert int((batch["w"] == 1.0).sum()) == answers  # every answer a full-weight target


def test_hint_loss_rewards_one_head_that_finds_every_source_not_one_per_example():
    import math

    import torch
    from attnlab.lecture.train import hint_loss

    T = 4
    hint = torch.tensor([[0, 3, 1, 0], [1, 3, 2, 0]])  # two examples: row 3 should look at key 1, then key 2
    split = torch.zeros(1, 2, 2, T, T)  # [L, B, H, T, T]: head 0 finds example 0's source, head 1 example 1's
    split[0, 0, 0, 3, 1] = split[0, 1, 1, 3, 2] = 1.0
    split[0, 0, 1, 3, 0] = split[0, 1, 0, 3, 0] = 1.0
    one = torch.zeros(1, 2, 2, T, T)  # head 1 finds both, with 0.5 each
    one[0, 0, 1, 3, 1] = one[0, 1, 1, 3, 2] = 0.5
    assert hint_loss(list(split), hint).item() == pytest.approx(-(math.log(1 + 1e-6) + math.log(1e-6)) / 2, rel=1e-5)
    assert hint_loss(list(one), hint).item() == pytest.approx(-math.log(0.5 + 1e-6), rel=1e-5)
    assert hint_loss(list(one), hint) < hint_loss(list(split), hint)
    two_tasks = torch.tensor([[0, 3, 1, 0], [1, 3, 2, 1]])  # each task may pick its own head
    assert hint_loss(list(split), two_tasks).item() == pytest.approx(-math.log(1 + 1e-6), abs=1e-5)


def test_batcher_hints_name_each_answers_query_row_and_source():
    examples = list(islice(model_stream("decoder", 0), 32))
    batch = Batcher("decoder", ("retrieval", "induction"))(examples, Random(0))
    want = [(i, p - 1, s, ("retrieval", "induction").index(ex.task)) for i, ex in enumerate(examples)
            if ex.task in ("retrieval", "induction") for p, s in zip(ex.answer_positions, ex.source_positions)]
    assert batch["hint"].tolist() == [list(w) for w in want] and len(want) > 32
    x = batch["x"]
    for i, q, s, _ in want:  # the decoder's row q reads token q and predicts token q + 1 == the source's token
        assert int(batch["y"][i, q]) == int(x[i, s])
    assert "hint" not in Batcher("decoder")(examples, Random(0))


def test_shipped_recipes_leave_the_options_off():
    for recipe in RECIPES.values():
        assert (recipe.questions, recipe.mask_share, recipe.hint, recipe.hint_steps) == (1, 0.0, 0.0, 0)
        examples = list(islice(model_stream(recipe.corpus, 0), 20))
        assert list(denser(iter(examples), recipe, Random(0))) == examples


def test_train_command_takes_the_options_and_records_them(tmp_path, capsys):
    import json

    from attnlab.cli.main import main

    out = tmp_path / "dec"
    rc = main(["train", "--model", "lecture-decoder", "--steps", "2", "--batch", "4", "--questions", "3",
               "--context", "128", "--hint", "1", "--hint-steps", "2", "--hint-tasks", "retrieval,induction",
               "--out", str(out), "--no-card", "--quiet", "--eval-n", "5"])
    assert rc == 0
    meta = json.loads((out / "config.json").read_text())
    assert meta["attnlab"]["max_len"] == 128
    t = meta["training"]
    assert (t["questions"], t["hint"], t["hint_steps"], t["hint_tasks"]) == (3, 1.0, 2, ["retrieval", "induction"])


def test_hint_halves_take_a_lower_head_and_the_lookup_an_upper_one():
    import math

    import torch
    from attnlab.lecture.train import hint_loss

    T = 4
    hint = torch.tensor([[0, 3, 1, 0], [0, 1, 0, 1]])  # task 0: the lookup (row 3 → key 1); task 1: its first half
    low = torch.zeros(2, 1, 1, T, T)  # [L, B, H, T, T]: layer 0 does both
    low[0, 0, 0, 3, 1] = low[0, 0, 0, 1, 0] = 1.0
    assert hint_loss(list(low), hint).item() == pytest.approx(-math.log(1 + 1e-6), abs=1e-5)
    # with task 1 a half, the lookup must come from layer 1, which does not do it yet
    assert hint_loss(list(low), hint, halves=(1,)).item() == pytest.approx(-math.log(1e-6) / 2, rel=1e-4)
    low[1, 0, 0, 3, 1] = 1.0
    assert hint_loss(list(low), hint, halves=(1,)).item() == pytest.approx(-math.log(1 + 1e-6), abs=1e-5)
