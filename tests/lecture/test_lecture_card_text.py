"""The shipped lecture cards' lines that depend on the kind of model (summary, layers, objective, metric) are what
write_card writes today from each checkpoint's own config: keying the cards by cfg.objective changed no line."""

from __future__ import annotations

import json

import pytest
from attnlab.lecture.cards.lecture import KIND, METRIC, OBJECTIVE, write_card
from attnlab.model.config import ModelConfig
from attnlab.model.registry import BUNDLED_DIR

WANT = {"lecture-decoder": "causal", "lecture-encoder": "masked", "lecture-encdec": "seq2seq", "lecture-moe": "causal"}


def _kind_lines(text: str) -> list[str]:
    """The card's lines that name what kind of model it is: the summary, the layers, the objective and the metric
    (the training and signal lines are left out: later wording changes reach a card only when it is rewritten)."""
    return [ln for ln in text.split("\n") if ln.startswith(("A small ", "- Objective: ", "`attnlab eval "))
            or " heads, d_model " in ln]


@pytest.mark.parametrize("name", list(WANT))
def test_the_shipped_cards_kind_lines_are_rewritten_identically(tmp_path, name):
    folder = BUNDLED_DIR / name
    meta = json.loads((folder / "config.json").read_text())
    cfg = ModelConfig.from_dict(meta["attnlab"])
    assert cfg.objective == WANT[name]
    shipped = (folder / "README.md").read_text()
    n = int(shipped.split(f"attnlab eval --model {name} --n ", 1)[1].split(" ")[0])
    card = write_card(tmp_path, name, cfg, meta.get("training", {}), {"tasks": {}}, eval_n=n).read_text()
    got = _kind_lines(card)
    assert len(got) == 4 and got == _kind_lines(shipped)
    assert f"A small {KIND[WANT[name]]} trained" in card and f"- Objective: {OBJECTIVE[WANT[name]]}." in card
    assert f"Metric: {METRIC[WANT[name]]}." in card
