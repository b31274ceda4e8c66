import contextlib
import io
import json

import numpy as np
import pytest
import torch
from attnlab.analysis.faithfulness.benchmark import (
    GRADIENT_METHODS,
    METHODS,
    ONE_STACK,
    faithfulness,
    head_jobs,
    top1,
)
from attnlab.analysis.faithfulness.cases import make_cases, token_ids
from attnlab.analysis.probes.ablation import ablation_deltas
from attnlab.analysis.probes.relevance import attention_sites
from attnlab.cli.main import main
from attnlab.model import hooks
from attnlab.model.inputs import InputError
from attnlab.model.lecture import MASK, decoder_examples
from attnlab.model.registry import BUNDLED_DIR, load
from attnlab.model.tokenizer import HFTokenizer


@pytest.fixture(scope="module")
def models():
    return {name: load(f"random-{name}") for name in ("decoder", "encoder", "encdec")}


def check_report(report, lm, n):
    assert set(report) >= {"methods", "ablation"}
    want = [m for m in METHODS if not (m in ONE_STACK and lm.arch == "encdec")]
    assert list(report["methods"]) == want
    for m in report["methods"].values():
        assert set(m) == {"top1", "n"} and m["n"] == n and 0 <= m["top1"] <= 1
        assert m["top1"] * n == pytest.approx(round(m["top1"] * n))  # a share of n examples
    sites = [s.site for s in attention_sites(lm.model)]
    assert [(r["site"], r["head"]) for r in report["ablation"]] == [(s, h) for s in sites for h in range(4)]
    assert all(set(r) == {"site", "head", "delta_p"} and -1 <= r["delta_p"] <= 1 for r in report["ablation"])
    assert 0 <= report["p_answer"] <= 1 and 0 <= report["accuracy"] <= 1 and 0 < report["chance"] < 1
    for per in report["by_task"].values():  # per-task shares add up to the overall share
        assert set(per) == set(want)
    for m in want:
        assert sum(per[m]["n"] for per in report["by_task"].values()) == n
        hits = sum(per[m]["top1"] * per[m]["n"] for per in report["by_task"].values())
        assert hits == pytest.approx(report["methods"][m]["top1"] * n)
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encdec"])
def test_report_shape_on_random_models(models, arch):
    lm = models[arch]
    check_report(faithfulness(lm, n=4, seed=1), lm, 4)


def test_cases_follow_the_objective(models):
    dec = make_cases(models["decoder"], 20, seed=0)
    for c in dec:
        ex = c.example
        p = ex.answer_positions[ex.source_positions.index(c.sources[0])]
        assert c.query == p - 1  # tokens[p] is predicted at p − 1
        assert c.answer_id == token_ids(models["decoder"].tokenizer, [ex.tokens[p]])[0]
        assert not c.candidates[c.query] and not c.candidates[0] and not c.candidates[c.query + 1:].any()
        assert c.candidates[c.sources[0]]
    enc = make_cases(models["encoder"], 20, seed=0)
    for c in enc:
        assert c.inputs.tokens[c.query] == MASK and c.inputs.ids[0, c.query] == models["encoder"].tokenizer.mask_id
        assert not c.candidates[[i for i, t in enumerate(c.inputs.tokens) if t == MASK]].any()
        assert c.candidates[c.sources[0]]
    ed = make_cases(models["encdec"], 10, seed=0)
    for c in ed:
        assert c.candidates.shape == (c.inputs.src_ids.shape[1],) and not c.candidates[0]  # source [BOS]
        assert (c.query + 1, c.sources[0]) in c.example.alignment


def test_same_seed_same_cases(models):
    a, b = make_cases(models["decoder"], 8, seed=5), make_cases(models["decoder"], 8, seed=5)
    assert [(c.query, c.sources) for c in a] == [(c.query, c.sources) for c in b]


def one_hot_query_rows(case, sites):
    """Every pattern at `sites`: the query row attends one-hot to the source (graph kept for ∇A)."""
    q, s = case.query, case.sources[0]

    def fn(x, name):
        keep = torch.ones_like(x)
        keep[..., q, :] = 0
        hot = torch.zeros_like(x)
        hot[..., q, s] = 1
        return x * keep + hot

    return {f"{site}.hook_pattern": fn for site in sites}


def test_attention_known_to_point_at_the_source_gives_top1_one(models):
    lm = models["decoder"]
    sites = [m.site for m in attention_sites(lm.model)]
    report = faithfulness(lm, n=6, seed=2, ablation=False, interventions=lambda c: one_hot_query_rows(c, sites))
    attention = [m for m in METHODS if m not in GRADIENT_METHODS]  # the gradient methods score embeddings, whose
    assert {m: report["methods"][m]["top1"] for m in attention} == {m: 1.0 for m in attention}  # path is not forced
    assert report["ablation"] == []
    # without the intervention the random model is far from perfect
    plain = faithfulness(lm, n=6, seed=2, ablation=False)
    assert min(r["top1"] for r in plain["methods"].values()) < 1.0


def test_encdec_cross_attention_known_to_point_at_the_source(models):
    lm = models["encdec"]
    cross = [m.site for m in attention_sites(lm.model) if m.cross]
    report = faithfulness(lm, n=5, seed=0, ablation=False, methods=("last_layer", "head_mean", "rollout"),
                          interventions=lambda c: one_hot_query_rows(c, cross))
    assert {m: r["top1"] for m, r in report["methods"].items()} == {"last_layer": 1.0, "head_mean": 1.0,
                                                                      "rollout": 1.0}


def test_batched_ablation_equals_zeroing_one_head_alone(models):
    lm = models["encdec"]
    case = make_cases(lm, 1, seed=3)[0]
    jobs = head_jobs(lm)
    deltas = ablation_deltas(lm, case.inputs, case.query, case.answer_id, jobs)

    def p_answer(iv):
        logits = lm.forward(case.inputs, interventions=iv, records=False).logits
        return torch.softmax(logits[0, case.query].double(), -1)[case.answer_id]

    clean = p_answer({})
    for j in (0, 9, len(jobs) - 1):
        site, head = jobs[j]
        want = p_answer({f"{site}.hook_pattern": hooks.zero_head(head)}) - clean
        assert deltas[j] == pytest.approx(float(want), abs=1e-7)
    assert np.abs(deltas).max() > 0


def test_chance_is_one_over_the_number_of_candidates(models):
    from attnlab.analysis.faithfulness.cases import chance

    for c in make_cases(models["decoder"], 5, seed=0):
        assert chance(c) == pytest.approx(1 / c.candidates.sum())


def test_top1_ranks_only_candidates_and_breaks_ties_low():
    s = np.array([5.0, 1, 3, 3, 9])
    assert top1(s, np.array([False, True, True, True, False])) == 2
    with pytest.raises(ValueError):
        top1(s, np.zeros(5, bool))


def test_a_vocabulary_without_lecture_words_is_an_input_error():
    from attnlab.model.lecture.tokenizer import build_tokenizer

    tok = HFTokenizer(build_tokenizer(), bos="[BOS]")
    assert token_ids(tok, ["[BOS]", "cat"])[0] == 2
    with pytest.raises(InputError, match="lecture token"):
        token_ids(tok, ["[BOS]", "zebra-not-a-word"])


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_cli_json_and_bad_input(models):
    rc, out, _ = run_cli("faithfulness", "--model", "random-encoder", "--n", "3", "--seed", "1", "--json")
    assert rc == 0
    check_report(json.loads(out), models["encoder"], 3)
    rc, out, _ = run_cli("faithfulness", "--model", "random-decoder", "--n", "2", "--no-ablation")
    assert rc == 0 and "rollout" in out
    for bad in (["--n", "0"], ["--n", "x"], ["--model", "no-such-model"]):
        args = ["faithfulness", "--model", "random-decoder", "--n", "2", *bad]
        rc, out, err = run_cli(*args)
        assert rc == 2 and err.startswith("attnlab: error:") and out == ""


def test_examples_can_be_given(models):
    exs = decoder_examples(3, 7, split="eval")
    r = faithfulness(models["decoder"], n=3, examples=exs, ablation=False, methods=("last_layer",))
    assert r["methods"]["last_layer"]["n"] == 3


@pytest.mark.skipif(not (BUNDLED_DIR / "lecture-decoder").is_dir(), reason="bundled lecture-decoder not built")
def test_bundled_decoder_n50():
    lm = load("lecture-decoder")
    report = faithfulness(lm, n=50, seed=0)
    check_report(report, lm, 50)
    # a trained model: some attribution beats a random ranking, and some head matters for the answer
    assert max(m["top1"] for m in report["methods"].values()) > 2 * report["chance"]
    assert min(r["delta_p"] for r in report["ablation"]) < -0.01
