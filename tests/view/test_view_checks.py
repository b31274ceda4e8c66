"""`attnlab check` on a transformers view: the invariants of transformers' own weights, every other check SKIPped
with its reason (it used to end in a traceback: a view's record has no q)."""

from __future__ import annotations

import json

import attnlab.model as model
import numpy as np
import pytest
from attnlab.analysis.machinery.checks import FUSED, TOL_ROWSUM, run_checks
from attnlab.cli.main import main

from tests.view.fixtures import FAMILIES, hf_attentions, make_view_model

TEXT, SRC = "the cat sat on the mat because the mat was warm", "a dog ran in the park"
SKIPPED = [f"eager_vs_{b}" for b in FUSED] + ["cache_vs_no_cache_logits", "cache_vs_no_cache_pattern",
                                              "greedy_cache_tokens_equal"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("view-checks")
    return {f: make_view_model(f, root / f, seed=i) for i, f in enumerate(FAMILIES)}


@pytest.mark.parametrize("family", FAMILIES)
def test_invariants_of_transformers_weights(folders, family):
    lm = model.load(str(folders[family]))
    inputs = lm.encode(TEXT, SRC) if lm.reads_source else lm.encode(TEXT)
    report = run_checks(lm, inputs)
    rows = {c["name"]: c for c in report["checks"]}
    assert list(rows) == ["rows_sum_to_one", "no_mass_outside_mask", "finite", *SKIPPED]
    assert report["passed"] is True
    src = inputs.src_ids[0].tolist() if inputs.src_ids is not None else None
    ref = hf_attentions(folders[family], inputs.ids[0].tolist(), src)
    worst = max(float(np.abs(w[0].numpy().sum(-1) - 1).max()) for ws in ref.values() for w in ws)
    assert rows["rows_sum_to_one"]["value"] == pytest.approx(worst, abs=1e-9) and worst <= TOL_ROWSUM
    assert rows["no_mass_outside_mask"]["value"] == 0.0 and rows["finite"]["value"] == 0.0
    for name in SKIPPED:
        assert rows[name]["value"] is None and rows[name]["note"].startswith("not applicable: a transformers view")


def test_a_broken_weight_fails(folders, monkeypatch):
    """The invariants read the view's weights: doubling one site's weights fails rows_sum_to_one."""
    lm = model.load(str(folders["gptj"]))
    forward = type(lm).forward

    def doubled(self, inputs, **kw):
        out = forward(self, inputs, **kw)
        rec = out.capture.records["blocks.1.attn"]
        rec.pattern_full = rec.pattern_full * 2
        return out

    monkeypatch.setattr(type(lm), "forward", doubled)
    rows = {c["name"]: c for c in run_checks(lm, lm.encode(TEXT))["checks"]}
    assert rows["rows_sum_to_one"]["passed"] is False and rows["rows_sum_to_one"]["value"] == pytest.approx(1, abs=1e-5)


def test_cli_check_on_a_view(folders, capsys):
    assert main(["check", "--model", str(folders["falcon"])]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["PASS"] * 3 + ["SKIP"] * len(SKIPPED)
    assert "Traceback" not in out + err
    assert main(["check", "--model", str(folders["pegasus"]), "--src-text", SRC, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and sum(c["value"] is None for c in report["checks"]) == len(SKIPPED)
