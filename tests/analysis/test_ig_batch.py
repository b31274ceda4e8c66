"""Integrated gradients of many inputs in shared passes (attributions.integrated_gradients_many,
embed_path.along_paths) against one call each, the definition: the same steps, logits and rows to 1e-5, complete;
inputs of different lengths (a decoder's padded, other models' grouped), each row its own source; and `attnlab faithfulness --methods`."""

import numpy as np
import pytest
from attnlab.analysis.faithfulness.benchmark import faithfulness
from attnlab.analysis.faithfulness.cases import make_cases
from attnlab.analysis.probes.attributions import integrated_gradients, integrated_gradients_many
from attnlab.analysis.probes.ig_rule import TOLERANCE
from attnlab.cli.main import main
from attnlab.model.registry import load

from tests.analysis.test_relevance import tiny

TEXTS = ["ab cd", "the cat sat", "x", "a longer text here", "the cat sat"]


def _same(many, one, atol=1e-5):
    for a, b in zip(many, one, strict=True):
        assert (a.steps, a.target_id, a.position) == (b.steps, b.target_id, b.position)
        assert a.logit == pytest.approx(b.logit, abs=atol) and a.baseline_logit == pytest.approx(b.baseline_logit,
                                                                                                 abs=atol)
        np.testing.assert_allclose(a.row, b.row, atol=atol, rtol=0)
        if b.source_row is not None:
            np.testing.assert_allclose(a.source_row, b.source_row, atol=atol, rtol=0)
        assert a.total == pytest.approx(a.logit - a.baseline_logit, rel=max(TOLERANCE, b.completeness_error) + 1e-6)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encdec"])
def test_batched_equals_one_call_each(arch):
    lm = tiny(arch, 2)
    sources = ["xyz", "abc", "uvw st", "pq", "zyx"]  # the two "the cat sat": sources of one length, not one text
    inputs = [lm.encode(t, src) if arch == "encdec" else lm.encode(t) for t, src in zip(TEXTS, sources)]
    jobs = [(inp, -1 if arch == "decoder" else 1, None if k % 2 else 7) for k, inp in enumerate(inputs)]
    many = integrated_gradients_many(lm, jobs)
    one = [integrated_gradients(lm, inp, pos, tid) for inp, pos, tid in jobs]
    _same(many, one, atol=1e-9)  # a float64 model: only the summation order differs
    assert len({inp.ids.shape[1] for inp in inputs}) == 4  # lengths differ: padded (decoder) or grouped


def test_fixed_steps_and_bad_steps():
    lm = tiny("decoder", 2)
    jobs = [(lm.encode(t), -1, None) for t in TEXTS[:3]]
    many = integrated_gradients_many(lm, jobs, steps=16)
    assert [(a.steps, a.rows) for a in many] == [(16, 17)] * 3  # 8 even panels: 17 nodes, each run once
    _same(many, [integrated_gradients(lm, i, p, t, steps=16) for i, p, t in jobs], atol=1e-9)
    for bad in (31, 0, 514):
        with pytest.raises(ValueError, match=f"multiple of 2 steps from 2 to 512, not {bad}"):
            integrated_gradients_many(lm, jobs, steps=bad)


def test_lecture_decoder_examples_to_1e_5():
    lm = load("lecture-decoder")  # float32: the shared passes' sums differ from one input's in rounding only
    cases = make_cases(lm, 4, seed=0)
    jobs = [(c.inputs, c.query, c.answer_id) for c in cases]
    many = integrated_gradients_many(lm, jobs)
    _same(many, [integrated_gradients(lm, *j) for j in jobs])
    assert all(a.completeness_error <= TOLERANCE for a in many)
    assert all(a.rows == a.steps + 1 for a in many)  # every row run is a node of the final rule
    assert len({c.inputs.ids.shape[1] for c in cases}) > 1


@pytest.mark.slow
def test_faithfulness_report_unchanged_by_batching():
    lm = load("lecture-decoder")
    cases = make_cases(lm, 3, seed=0)
    batched = faithfulness(lm, cases=cases, methods=["integrated_gradients", "last_layer"], ablation=False)
    one = faithfulness(lm, cases=cases, methods=["integrated_gradients", "last_layer"], ablation=False,
                       interventions=lambda case: {})  # interventions: one example at a time, as before
    assert batched["methods"] == one["methods"]
    for a, b in zip(batched["integrated_gradients"]["examples"], one["integrated_gradients"]["examples"]):
        assert a["steps"] == b["steps"] and a["logit"] == pytest.approx(b["logit"], abs=1e-5)


def test_methods_option(capsys):
    import json

    assert main(["faithfulness", "--model", "lecture-decoder", "--n", "2", "--no-ablation", "--json",
                 "--methods", "rollout,last_layer,rollout"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["methods"]) == ["rollout", "last_layer"] and "integrated_gradients" not in report
    assert main(["faithfulness", "--model", "lecture-decoder", "--methods", "rollout,saliency"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab: error: --methods takes a comma-separated list of last_layer, head_mean, ") and \
        err.endswith("unknown: saliency\n")
    assert main(["faithfulness", "--model", "lecture-decoder", "--methods", " , "]) == 2
    assert capsys.readouterr().err.endswith("got none\n")


def test_a_decoder_read_up_to_its_position_equals_the_whole_input(monkeypatch):
    """Without interventions a causal decoder's rows stop at the position (embed_path.along_paths); a no-op
    intervention keeps the whole input: the same logits and rows, and 0 for every later token."""
    lm = tiny("decoder", 2)
    inp = lm.encode("a longer text here")
    keep = {"blocks.0.hook_resid_pre": lambda x, name: x}
    widths, forward = [], lm.forward
    monkeypatch.setattr(lm, "forward", lambda i, **kw: widths.append(i.ids.shape[1]) or forward(i, **kw))
    for pos in (3, 9):
        cut = integrated_gradients(lm, inp, pos, steps=16)
        assert widths[1:] == [pos + 1]  # after the target's forward: one pass of 17 rows, the input cut
        widths.clear()
        whole = integrated_gradients(lm, inp, pos, steps=16, interventions=keep)
        assert widths[1:] == [inp.ids.shape[1]]
        widths.clear()
        assert len(cut.row) == len(whole.row) == inp.ids.shape[1]
        np.testing.assert_allclose(cut.row, whole.row, atol=1e-10, rtol=0)
        assert cut.logit == pytest.approx(whole.logit, abs=1e-10) and cut.row[pos + 1:].tolist() == [0.0] * (
            len(cut.row) - pos - 1)
        assert np.abs(cut.row[1:pos + 1]).sum() > 1e-3
