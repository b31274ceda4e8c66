"""A bundled model's default faithfulness report ships beside its checkpoint: a fresh install's Rollout page reads
it instead of scoring 40 examples on its first visit."""

import dataclasses
import json
from unittest import mock

import pytest
from attnlab.analysis.faithfulness import benchmark as faithfulness_
from attnlab.analysis.faithfulness import store
from attnlab.model.registry import bundled_names, load

FAST = tuple(m for m in faithfulness_.METHODS if m != "integrated_gradients")


@pytest.mark.parametrize("name", bundled_names("text"))
def test_every_bundled_text_model_ships_its_report_for_its_weights(name):
    lm = load(name)
    path = store.report_path(lm, store.SHIPPED["n"], store.SHIPPED["seed"])
    assert path.parent == store.BUNDLED_DIR / name and path.is_file(), (
        f"no report for {name}'s current weights: run `attnlab faithfulness --model {name} --ship`")
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["model"] == name and report["n_examples"] == 40 and report["seed"] == 0
    assert list(report["methods"]) == [m for m in faithfulness_.METHODS if m in report["methods"]]
    assert "integrated_gradients" in report["methods"] and report["ablation"] == []
    assert len(list(path.parent.glob("faithfulness-*.json"))) == 1  # no stale report beside it


@pytest.mark.parametrize("name", ["lecture-decoder", "lecture-encoder", "lecture-encdec"])
def test_shipped_report_equals_a_fresh_score(name):
    """Integrated gradients too on lecture-decoder and lecture-encdec (a report written under an older rule, or with
    another example's source in a shared pass, fails here)."""
    lm = load(name)
    shipped = store.read_report(store.report_path(lm, 40, 0))
    methods = FAST if name == "lecture-encoder" else faithfulness_.METHODS
    fresh = json.loads(json.dumps(faithfulness_.faithfulness(lm, 40, 0, methods=methods, ablation=False)))
    assert set(fresh["methods"]) <= set(shipped["methods"])  # the methods this model can run (no flow: encdec)
    for m in fresh["methods"]:
        assert shipped["methods"][m] == fresh["methods"][m], m  # top-1 counts over the same 40 examples
    assert (shipped["accuracy"], shipped["chance"]) == (fresh["accuracy"], fresh["chance"])
    assert shipped["p_answer"] == pytest.approx(fresh["p_answer"], rel=1e-6)  # a float mean: last bits may differ


def test_ship_writes_beside_the_checkpoint_and_is_read_before_the_cache(tmp_path, monkeypatch):
    bundled, cache = tmp_path / "checkpoints", tmp_path / "cache"
    monkeypatch.setattr(store, "BUNDLED_DIR", bundled)
    monkeypatch.setattr(store, "SHIPPED", {**store.SHIPPED, "n": 5, "methods": FAST})
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(cache))
    lm = dataclasses.replace(load("random-decoder"), source="bundled")
    (bundled / lm.name).mkdir(parents=True)
    stale = bundled / lm.name / "faithfulness-0123.json"
    stale.write_text("{}")
    path = store.ship(lm)
    assert path.parent == bundled / lm.name and path.is_file() and not stale.exists()
    assert store.report_path(lm, 5, 0, methods=FAST) == path
    with mock.patch.object(faithfulness_, "faithfulness", side_effect=AssertionError("computed again")):
        report = store.kept_faithfulness(lm, 5, 0, methods=FAST)
    assert report == json.loads(path.read_text(encoding="utf-8")) and report["n_examples"] == 5
    assert not cache.exists()  # read from the checkpoint's folder; nothing written to the cache
    other = store.report_path(lm, 6, 0, methods=FAST)  # a report that does not ship: the cache's place
    assert other.parent == cache / "faithfulness" and not other.exists()


def test_ship_refuses_a_model_that_is_not_bundled():
    with pytest.raises(ValueError, match="not a bundled model"):
        store.ship(load("random-decoder"))


def test_cli_ship_refuses_a_model_that_is_not_bundled(capsys):
    from attnlab.cli.main import main

    rc = main(["faithfulness", "--model", "random-decoder", "--ship"])
    assert rc == 2 and "--ship writes beside a bundled text model's checkpoint" in capsys.readouterr().err
