"""The attnlab command on lecture-vit and on Hugging Face ViT folders: eval, faithfulness, check, compare-hf,
models, train."""

import json

import numpy as np
import pytest
from attnlab.analysis.probes.patch_maps import patch_region
from attnlab.cli.main import main
from attnlab.model.lecture.shapes import shape_images

from tests.model.test_vit_hf import make_vit


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_eval_reports_accuracy_per_class(capsys):
    rc, out, _ = run_cli(capsys, "eval", "--model", "lecture-vit", "--n", "40", "--json")
    r = json.loads(out)
    assert rc == 0 and r["n"] == 40 and set(r["per_class"]) == {"left", "right", "above", "below"}
    assert 0 <= r["accuracy"] <= 1


def test_faithfulness_json_keys_and_chance(capsys):
    rc, out, _ = run_cli(capsys, "faithfulness", "--model", "lecture-vit", "--n", "6", "--seed", "2", "--json")
    r = json.loads(out)
    assert rc == 0 and r["arch"] == "vit" and r["n_examples"] == 6
    assert list(r["methods"]) == ["last_layer", "head_mean", "rollout", "attention_norm", "value_zeroing",
                                  "grad_rollout", "relevance", "input_x_gradient", "integrated_gradients",
                                  "attention_x_gradient"]
    ig = r["integrated_gradients"]
    assert ig["baseline"] == "every patch's embedding zero" and len(ig["examples"]) == 6
    assert ig["max_error"] <= 0.01 and all(e["completeness_error"] <= 0.01 for e in ig["examples"])
    for m in r["methods"].values():
        assert set(m) == {"pointing", "mass", "n"} and 0 <= m["pointing"] <= 1 and 0 <= m["mass"] <= 1
    regions = [patch_region(ex.mask, (8, 8)) for ex in shape_images(6, 2, "eval")]
    assert r["chance"]["mass"] == pytest.approx(np.mean([g.mean() for g in regions]))
    assert r["chance"]["pointing"] == pytest.approx(np.mean([(g > 0).mean() for g in regions]))
    assert len(r["heads"]) == 16 and r["heads"][0]["mass"] >= r["heads"][-1]["mass"]


def test_check_passes_and_skips_the_cache(capsys):
    rc, out, _ = run_cli(capsys, "check", "--model", "lecture-vit", "--json")
    r = json.loads(out)
    assert rc == 0 and r["passed"]
    names = {c["name"]: c for c in r["checks"]}
    assert {"rows_sum_to_one", "eager_vs_sdpa", "eager_vs_flash"} <= set(names)
    assert "vision transformer has no KV cache" in names["cache_vs_no_cache_logits"]["note"]


def test_compare_hf_and_models_cover_vit(capsys, tmp_path):
    folder = make_vit(tmp_path / "vit", True)
    rc, out, _ = run_cli(capsys, "compare-hf", "--model", str(folder), "--json")
    r = json.loads(out)
    assert rc == 0 and r["max_abs_attention"] <= 1e-5 and r["max_abs_logits"] <= 1e-4
    rc, out, _ = run_cli(capsys, "models", "--json")
    vit = next(m for m in json.loads(out)["models"] if m["name"] == "lecture-vit")
    assert vit["kind"] == "vision transformer" and vit["classes"] == 4 and vit["context"] == 65


def test_train_dispatches_lecture_vit(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "train", "--model", "lecture-vit", "--steps", "2", "--batch", "4", "--eval-n", "8",
                         "--out", str(tmp_path / "v"), "--no-card", "--quiet")
    assert rc == 0 and "eval @ 2" in err
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    assert cfg["attnlab"]["arch"] == "vit" and cfg["training"]["steps"] == 2
    assert main(["train", "--model", "lecture-vit", "--mix", "a=1", "--out", str(tmp_path / "w")]) == 2
    assert "text-recipe options" in capsys.readouterr().err
