"""Training the lecture models (a tiny run here), the shipped checkpoints, `attnlab eval` and `attnlab check`."""

import json
import time
from dataclasses import replace
from itertools import islice
from random import Random

import pytest
import torch
from attnlab.cli.main import main
from attnlab.lecture.batches import IGNORE, Batcher
from attnlab.lecture.evaluate import evaluate
from attnlab.lecture.train import RECIPES, TINY, Recipe, train
from attnlab.model.lecture import model_stream
from attnlab.model.lecture.tasks_retrieval import ONE_HOP
from attnlab.model.registry import bundled_names, load

BUNDLED = ["lecture-decoder", "lecture-encoder", "lecture-encdec"]
TINY_RECIPE = Recipe("decoder", TINY, steps=50, batch=16, lr=3e-3, warmup=10)


def test_tiny_training_run_loss_falls():
    t = time.process_time()  # CPU seconds: the machine may be shared
    res = train(TINY_RECIPE, progress=False)
    assert time.process_time() - t < 60
    first, last = sum(res.losses[:5]) / 5, sum(res.losses[-5:]) / 5
    assert last < first - 0.5, (first, last)


def test_training_is_deterministic():
    recipe = replace(TINY_RECIPE, steps=3)
    a, b = train(recipe, progress=False), train(recipe, progress=False)
    assert a.losses == b.losses
    for (k, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), k
    c = train(replace(recipe, seed=1), progress=False)
    assert c.losses != a.losses


@pytest.mark.parametrize("kind", ["decoder", "encoder", "encdec"])
def test_batches_pad_and_mask_only_real_targets(kind):
    examples = list(islice(model_stream(kind, 0), 64))
    batch = Batcher(kind)(examples, Random(0))
    x, y, w = batch["x"], batch["y"], batch["w"]
    assert x.shape == y.shape == w.shape
    assert ((y == IGNORE) == (w == 0)).all()  # a weight exactly where there is a real target
    if kind == "encoder":
        mask_id = Batcher(kind).mask
        for i, ex in enumerate(examples):
            hidden = set((x[i] == mask_id).nonzero().flatten().tolist())
            assert set(ex.answer_positions) <= hidden
            assert not hidden & (set(ex.source_positions) | set(ex.support_positions))
            assert all(int(y[i, p]) != IGNORE for p in hidden)


def test_recipes_share_size_between_decoder_and_encoder():
    dec, enc = RECIPES["lecture-decoder"].cfg, RECIPES["lecture-encoder"].cfg
    for f in ("d_model", "n_heads", "n_layers", "max_len", "positional", "vocab_size", "norm", "mlp"):
        assert getattr(dec, f) == getattr(enc, f), f


def test_bundled_checkpoints_are_shipped_and_small():
    assert set(BUNDLED) <= set(bundled_names())
    from attnlab.model.registry import BUNDLED_DIR

    total = sum(p.stat().st_size for name in BUNDLED for p in (BUNDLED_DIR / name).iterdir())
    assert total <= 15 * 2**20
    for name in BUNDLED:
        for f in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
            assert (BUNDLED_DIR / name / f).is_file(), (name, f)


# Issue 29's bars on fresh examples: agreement and induction ≥ 99% for the decoder, the encoder's masked
# retrieval ≥ 90%, masked induction and brackets ≥ 95%. BELOW_TARGET: (model, task) pairs whose shipped
# checkpoint is still below its bar (see the model cards). Strict: the test fails the day a retrained
# checkpoint clears the bar, so this list gets emptied.
BARS = {("lecture-decoder", "agreement"): 0.99, ("lecture-decoder", "induction"): 0.99,
        ("lecture-encoder", "induction"): 0.95, ("lecture-encoder", "brackets"): 0.95}
BELOW_TARGET: set = set()
TASKS = {"lecture-decoder": ["agreement", "induction", "retrieval"],
         "lecture-encoder": ["agreement", "brackets", "induction", "retrieval"],
         "lecture-encdec": ["translation"]}


@pytest.fixture(scope="module")
def fresh_reports():
    return {name: evaluate(load(name), 1000, seed=12345) for name in BUNDLED}  # ≥ 200 examples per task


@pytest.mark.parametrize("name, task", [
    pytest.param(n, t, marks=pytest.mark.xfail(strict=True, reason="below target: see the model card"))
    if (n, t) in BELOW_TARGET else (n, t) for n in BUNDLED for t in TASKS[n]])
def test_bundled_checkpoint_reaches_its_bar_on_fresh_examples(fresh_reports, name, task):
    m = fresh_reports[name]["tasks"][task]
    assert m["n"] > 0 and m["accuracy"] >= BARS.get((name, task), 0.9), (name, task, m)


def test_decoder_answers_two_hop_retrieval():
    """Issue 29: ≥ 90% of fresh two-hop questions (the best friend's age or pet)."""
    kinds = evaluate(load("lecture-decoder"), 600, seed=12345, detail=True)["tasks"]["retrieval"]["kinds"]
    two = [k for k in kinds if k.startswith("friend_")]
    n = sum(kinds[k]["answers"] for k in two)
    assert n >= 100 and sum(kinds[k]["accuracy"] * kinds[k]["answers"] for k in two) / n >= 0.9, kinds


def test_decoder_answers_the_lecture_story_question():
    """Issue 29: ≥ 90% of fresh stories asking the lecture's question (how old is the best friend of X?)."""
    best = evaluate(load("lecture-decoder"), 400, seed=12345, detail=True)["tasks"]["story"]["kinds"]["best"]
    assert best["n"] >= 80 and best["accuracy"] >= 0.9, best


def test_decoder_answers_one_hop_retrieval():
    """Issue 14's first target, one-hop half: ≥ 95% of fresh one-hop questions."""
    kinds = evaluate(load("lecture-decoder"), 600, seed=12345, detail=True)["tasks"]["retrieval"]["kinds"]
    n = sum(kinds[k]["answers"] for k in ONE_HOP)
    right = sum(kinds[k]["accuracy"] * kinds[k]["answers"] for k in ONE_HOP)
    assert n >= 100 and right / n >= 0.95, {k: kinds[k] for k in ONE_HOP}


@pytest.mark.parametrize("name", BUNDLED)
def test_check_passes_on_bundled_models(capsys, name):
    rc = main(["check", "--model", name, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] is True, [c for c in report["checks"] if not c["passed"]]


def test_eval_command_prints_the_json_contract(capsys):
    rc = main(["eval", "--model", "lecture-decoder", "--n", "30", "--seed", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and set(report) == {"tasks"}
    assert set(report["tasks"]) == {"retrieval", "induction", "agreement", "story"}  # + n // 2 lecture stories
    assert sum(m["n"] for m in report["tasks"].values()) == 30 + 15
    for m in report["tasks"].values():
        assert set(m) == {"n", "accuracy"}
        assert isinstance(m["n"], int) and 0.0 <= m["accuracy"] <= 1.0
    again = main(["eval", "--model", "lecture-decoder", "--n", "30", "--seed", "3", "--json"])
    assert again == 0 and json.loads(capsys.readouterr().out) == report


def test_eval_command_rejects_models_without_the_lecture_vocabulary(capsys):
    assert main(["eval", "--model", "random-decoder", "--json"]) == 2
    assert "not a lecture model" in capsys.readouterr().err
