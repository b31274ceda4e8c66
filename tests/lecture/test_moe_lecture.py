"""The bundled lecture-moe: its recipe, a checkpoint within 6 MB with experts, `attnlab check` passing on it,
and a card that reports the accuracy and the measured specialisation."""

from __future__ import annotations

import re

from attnlab.cli.main import main
from attnlab.lecture.train import RECIPES
from attnlab.model.registry import BUNDLED_DIR, bundled_names, load


def test_recipe_is_a_moe_decoder_upcycled_from_lecture_decoder():
    r = RECIPES["lecture-moe"]
    assert (r.corpus, r.cfg.arch, r.cfg.mlp, r.cfg.n_experts, r.cfg.top_k) == ("decoder", "decoder", "moe", 4, 2)
    assert r.init.endswith("lecture-decoder") and r.cfg.router_aux_coef > 0


def test_checkpoint_is_small_and_routes():
    assert "lecture-moe" in bundled_names()
    folder = BUNDLED_DIR / "lecture-moe"
    assert (folder / "model.safetensors").stat().st_size <= 6 * 2**20
    lm = load("lecture-moe")
    run = lm.run("alvo is nine . how old is alvo ?")
    assert sorted(run.routers) == [f"blocks.{i}.mlp" for i in range(4)]


def test_attnlab_check_passes(capsys):
    assert main(["check", "--model", "lecture-moe"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_card_reports_accuracy_cost_and_specialists():
    card = (BUNDLED_DIR / "lecture-moe" / "README.md").read_text()
    assert "attnlab train --model lecture-moe" in card and "python -m attnlab.lecture.cards.moe" in card
    assert re.search(r"\| \*\*induction\*\* \| all \| \d+ \| \*\*\d+\.\d%\*\*", card)
    assert "Which experts take which tokens" in card and "The expert taking most of each class: number words — layer" in card
    assert "| layer | expert | all tokens | number words | names | pets | punctuation |" in card
