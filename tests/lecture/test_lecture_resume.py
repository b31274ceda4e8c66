"""Chunked training data (`Bank`), the resumable state (`attnlab train --resume`), the learning-curve picture."""

import json
from dataclasses import replace
from itertools import islice
from random import Random

import pytest
import torch
from attnlab.lecture.batches import IGNORE, Bank, Batcher
from attnlab.lecture.curve import draw, jump, tasks_of
from attnlab.lecture.resume import has_state
from attnlab.lecture.train import CHUNK, TINY, Recipe, batches_from, train
from attnlab.model.lecture import model_stream
from attnlab.model.lecture.tasks_retrieval import NAMES, owner_position
from PIL import Image

RECIPE = Recipe("decoder", TINY, steps=8, batch=8, lr=3e-3, warmup=2)


@pytest.mark.parametrize("kind", ["decoder", "encoder", "encdec"])
def test_bank_rows_equal_the_batcher_on_the_same_examples(kind):
    examples = list(islice(model_stream(kind, 0), 48))
    whole = Batcher(kind)(examples, Random(0))
    bank = Bank(examples, Batcher(kind), Random(0))
    rows = torch.tensor([5, 17, 40, 2])
    batch = bank(rows)
    for k, v in batch.items():
        assert torch.equal(v, whole[k][rows, : v.shape[1]]), k
    T, pad = batch["x"].shape[1], Batcher(kind).pad
    assert (whole["x"][rows, T:] == pad).all()  # only padding was cut
    assert int(batch["x"].shape[1]) == int(bank.len_x[rows].max())  # cut to the longest row, no further
    order = bank.order(8, torch.Generator().manual_seed(0))
    assert sorted(torch.cat(order).tolist()) == list(range(48))  # every row once


def test_bank_renumbers_the_hints_to_the_batch_rows():
    examples = list(islice(model_stream("decoder", 0), 32))
    batcher = Batcher("decoder", ("retrieval", "retrieval-owner"))
    whole = batcher(examples, Random(0))["hint"]
    rows = torch.tensor([7, 3, 30])
    hint = Bank(examples, batcher, Random(0))(rows)["hint"]
    want = [[list(rows.tolist()).index(int(h[0])), *h[1:].tolist()] for h in whole if int(h[0]) in rows.tolist()]
    assert sorted(hint.tolist()) == sorted(want) and len(want) > 0


def test_owner_hints_point_from_each_fact_value_to_its_name():
    examples = [ex for ex in islice(model_stream("decoder", 0), 200) if ex.task == "retrieval"]
    found = 0
    for ex in examples:
        for s in ex.source_positions:
            o = owner_position(ex.tokens, s)
            if o is None:  # "V is the best friend of P .": the name comes after the value
                assert ex.tokens[s + 1: s + 6] == ("is", "the", "best", "friend", "of")
                continue
            found += 1
            assert ex.tokens[o] in NAMES and o < s and "." not in ex.tokens[o:s]
    assert found > len(examples) * 0.8


def test_batches_are_a_function_of_the_step():
    recipe = replace(RECIPE, batch=4)
    a = list(islice(batches_from(recipe, 0), CHUNK + 3))
    b = list(islice(batches_from(recipe, CHUNK - 2), 5))
    for x, y in zip(a[CHUNK - 2:], b):
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert not torch.equal(a[0]["x"][:, :5], a[CHUNK]["x"][:, :5])  # the next chunk is new data
    assert all(((v["y"] == IGNORE) == (v["w"] == 0)).all() for v in a[:10])


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    recipe = replace(RECIPE, attn_only=3)  # the MLPs join after the stop
    full = train(recipe, progress=False)
    first = train(recipe, progress=False, out=tmp_path, save_every=2, until=3)
    assert has_state(tmp_path) and first.steps == 3 and first.losses == full.losses[:3]
    rest = train(recipe, progress=False, out=tmp_path, save_every=2, resume=True)
    assert rest.losses == full.losses
    for (k, x), (_, y) in zip(full.model.state_dict().items(), rest.model.state_dict().items()):
        assert torch.equal(x, y), k
    saved = json.loads((tmp_path / "resume" / "state.json").read_text())
    assert saved["step"] == 8 and len(saved["losses"]) == 8


def test_resume_without_a_saved_state_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no training state"):
        train(RECIPE, progress=False, out=tmp_path, resume=True)


def test_attention_only_steps_keep_the_mlps_at_zero():
    res = train(replace(RECIPE, steps=3, attn_only=5), progress=False)
    for name, p in res.model.named_parameters():
        if name.endswith("mlp.down.weight"):
            assert float(p.abs().max()) == 0.0, name


def test_curve_picture_and_jump(tmp_path):
    curve = [{"step": s, "seconds": s / 10, "retrieval": a, "induction": 1.0}
             for s, a in [(0, 0.3), (200, 0.31), (400, 0.9), (600, 0.97)]]
    assert tasks_of(curve) == ["retrieval", "induction"]
    assert jump(curve, "retrieval") == {"from_step": 200, "to_step": 400, "before": 0.31, "after": 0.9}
    img = Image.open(draw(curve, tmp_path / "c.png"))
    assert img.format == "PNG" and img.size == (760, 420)
    px = img.convert("RGB")
    colors = {px.getpixel((x, y)) for x in range(60, 570, 3) for y in range(20, 380, 3)}
    assert (31, 119, 180) in colors and (214, 39, 40) in colors  # one line per task
    with pytest.raises(ValueError):
        draw([], tmp_path / "empty.png")


def test_induction_prev_hints_point_one_token_back():
    examples = [ex for ex in islice(model_stream("encoder", 0), 60) if ex.task == "induction"]
    hint = Batcher("encoder", ("induction", "induction-prev"))(examples, Random(0))["hint"]
    prev = hint[hint[:, 3] == 1]
    assert len(prev) > len(examples) and (prev[:, 2] == prev[:, 1] - 1).all()
    rows = {(int(i), int(r)) for i, r, _, _ in prev}
    for i, ex in enumerate(examples):
        assert {(i, p) for p in ex.answer_positions if p > 1} <= rows  # the [MASK] rows too


def test_two_hop_answers_can_be_their_own_hint_task():
    from attnlab.model.lecture.tasks_retrieval import is_two_hop

    examples = [ex for ex in islice(model_stream("decoder", 0), 80) if ex.task == "retrieval"]
    assert {is_two_hop(ex.tokens, ex.answer_positions[0]) for ex in examples} == {True, False}
    for ex in examples:
        assert is_two_hop(ex.tokens, ex.answer_positions[0]) == ex.kind.startswith("friend_")
    hint = Batcher("decoder", ("retrieval", "retrieval-2hop"))(examples, Random(0))["hint"]
    two = {int(i) for i, _, _, t in hint if t == 1}
    assert two == {i for i, ex in enumerate(examples) if ex.kind.startswith("friend_")}


def test_card_carries_the_curve_picture_its_jump_and_the_stages(tmp_path):
    from attnlab.lecture.cards.lecture import CURVE_PNG, write_card

    training = {"steps": "100 + 200", "batch": 8, "lr": 1e-3, "seed": 0, "seconds": 90.0,
                "stages": [{"command": "attnlab train --model lecture-decoder", "steps": 100, "seconds": 30},
                           {"command": "attnlab train --model lecture-decoder --init A", "steps": 200, "seconds": 60}]}
    curve = [{"step": 100, "retrieval": 0.3}, {"step": 200, "retrieval": 0.35}, {"step": 300, "retrieval": 0.96}]
    card = write_card(tmp_path, "lecture-decoder", TINY, training, {"tasks": {}}, eval_n=5, curve=curve).read_text()
    assert f"![held-out accuracy per task vs training step]({CURVE_PNG})" in card
    assert Image.open(tmp_path / CURVE_PNG).format == "PNG"
    assert "- retrieval: 35% at step 200 → 96% at step 300" in card
    assert "stage 2: `attnlab train --model lecture-decoder --init A` — 200 steps, 1.0 min" in card


def test_one_hop_curriculum_leaves_two_hop_questions_out_of_the_first_chunks():
    from attnlab.model.lecture.tasks_retrieval import is_two_hop

    recipe = replace(RECIPE, batch=16, questions=4, mix={"retrieval": 1.0}, one_hop=CHUNK,
                     cfg=replace(TINY, max_len=96))
    batches = list(islice(batches_from(recipe, CHUNK - 1), 2))  # the last step of chunk 0, the first of chunk 1
    vocab = Batcher("decoder").vocab
    words = {i: w for w, i in vocab.items()}

    def two_hops(batch):
        n = 0
        for x, w in zip(batch["x"], batch["w"]):
            tokens = ["[BOS]"] + [words[int(i)] for i in x[1:]]
            n += sum(is_two_hop(tokens, int(p) + 1) for p in (w == 1.0).nonzero().flatten())
        return n

    assert two_hops(batches[0]) == 0 and two_hops(batches[1]) > 0
