"""The faithfulness report is computed once per weights and examples, kept on disk and read back."""

import json
from unittest import mock

import pytest
import torch
from attnlab.analysis.faithfulness import benchmark as faithfulness_
from attnlab.analysis.faithfulness.store import (
    joined,
    kept_faithfulness,
    read_report,
    report_path,
    weights_hash,
)
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.transformer import build_model


def test_kept_report_equals_fresh_and_is_read_back(tmp_path):
    lm = load("random-decoder")
    first = kept_faithfulness(lm, 6, 0, folder=tmp_path)
    assert first == json.loads(json.dumps(faithfulness_.faithfulness(lm, 6, 0, ablation=False)))
    assert len(list(tmp_path.glob("*.json"))) == 1
    again = load("random-decoder")  # another load of the same weights (a restarted server)
    with mock.patch.object(faithfulness_, "faithfulness", side_effect=AssertionError("recomputed")):
        assert kept_faithfulness(again, 6, 0, folder=tmp_path) == first
    kept_faithfulness(lm, 7, 0, folder=tmp_path)  # other examples: another report
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_other_weights_are_scored_again(tmp_path):
    lm = load("random-decoder")
    kept_faithfulness(lm, 5, 1, folder=tmp_path)
    h = weights_hash(lm.model)
    with torch.no_grad():
        next(lm.model.parameters()).view(-1)[0] += 1e-3  # one weight changed (a retrained checkpoint)
    assert weights_hash(lm.model) != h
    calls = []
    real = faithfulness_.faithfulness
    with mock.patch.object(faithfulness_, "faithfulness", side_effect=lambda *a, **k: calls.append(1) or real(*a, **k)):
        kept_faithfulness(lm, 5, 1, folder=tmp_path)
    assert calls == [1] and len(list(tmp_path.glob("*.json"))) == 2


def test_unwritable_folder_still_reports(tmp_path):
    lm = load("random-decoder")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    report = kept_faithfulness(lm, 4, 0, folder=blocker / "sub")
    assert report["n_examples"] == 4 and set(report["methods"]) == set(faithfulness_.METHODS)


@pytest.mark.parametrize("n", [0])
def test_bad_n_is_refused(tmp_path, n):
    from attnlab.model.inputs import InputError
    with pytest.raises(InputError):
        kept_faithfulness(load("random-decoder"), n, 0, folder=tmp_path)


def test_two_kept_halves_join_into_the_full_report(tmp_path):
    """Every method but integrated gradients, and integrated gradients alone, joined: the full report."""
    lm = load("random-decoder")
    ig = ("integrated_gradients",)
    fast = tuple(m for m in faithfulness_.METHODS if m not in ig)
    assert read_report(report_path(lm, 5, 0, methods=ig, folder=tmp_path)) is None  # nothing kept yet
    first = kept_faithfulness(lm, 5, 0, methods=fast, folder=tmp_path)
    assert "integrated_gradients" not in first["methods"] and "integrated_gradients" not in first
    assert joined(first, None) is first
    second = kept_faithfulness(lm, 5, 0, methods=ig, folder=tmp_path)
    assert read_report(report_path(lm, 5, 0, methods=ig, folder=tmp_path)) == second
    full = json.loads(json.dumps(faithfulness_.faithfulness(lm, 5, 0, ablation=False)))
    both = joined(first, second)
    assert list(both["methods"]) == list(full["methods"]) and both == full
    with pytest.raises(ValueError, match="different examples"):
        joined(first, kept_faithfulness(lm, 6, 0, methods=ig, folder=tmp_path))


def test_the_same_weights_under_another_configuration_are_scored_again(tmp_path):
    """A choice without weights of its own (here the MLP's activation) changes every number: the kept report of
    the same weights under the other configuration is not read back."""
    lm = load("random-decoder")
    gelu = kept_faithfulness(lm, 5, 0, folder=tmp_path, methods=("last_layer", "rollout"))
    cfg = lm.cfg.replace(mlp="relu")
    relu = LoadedModel(lm.name, build_model(cfg).eval(), lm.tokenizer, cfg, lm.source)
    relu.model.load_state_dict(lm.model.state_dict())
    assert weights_hash(relu.model) == weights_hash(lm.model)
    kept = kept_faithfulness(relu, 5, 0, folder=tmp_path, methods=("last_layer", "rollout"))
    fresh = json.loads(json.dumps(faithfulness_.faithfulness(relu, 5, 0, methods=("last_layer", "rollout"),
                                                             ablation=False)))
    assert kept == fresh and kept["p_answer"] != gelu["p_answer"]
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_the_key_reads_the_fields_set_away_from_their_defaults():
    """A configuration field added later at its default (as OPT-350m's project_tokens was) keeps every kept and
    shipped report's name; a field set away from it changes the key."""
    from attnlab.analysis.faithfulness.store import config_key
    from attnlab.model.config import ModelConfig

    cfg = ModelConfig(arch="decoder", d_model=16, n_heads=2, n_layers=2)
    key = config_key(cfg)
    assert "project_tokens" not in key and "'d_model': 16" in key and "'arch'" not in key  # "decoder" is the default
    assert config_key(cfg.replace(mlp="relu")) != key and config_key(cfg.replace(norm_eps=1e-6)) != key
    assert config_key(cfg.replace(d_embed=8, project_tokens=True)) != key
