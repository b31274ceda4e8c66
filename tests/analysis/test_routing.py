"""attnlab.analysis.probes.routing: the routing of a run equals its router records, forcing an expert changes exactly the
routing it may change, and the specialisation table counts first choices as separate runs do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.routing import force_expert_run, route_text, specialisation, specialists
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def lm():
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=3, max_len=64,
                      positional="rope", mlp="moe", n_experts=4, top_k=2, d_mlp=24)
    torch.manual_seed(0)
    return LoadedModel("random-moe", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")


def test_routing_equals_the_records(lm):
    r, run = route_text(lm, lm.encode(TEXT))
    T = len(run.tokens)
    assert r.gates.shape == (3, T, 4) and r.choice.shape == (3, T, 2) and r.entropy.shape == (3, T)
    for i in range(3):
        rec = run.routers[f"blocks.{i}.mlp"]
        np.testing.assert_array_equal(r.choice[i], rec.choice[0])
        np.testing.assert_allclose(r.gates[i][np.arange(T)[:, None], rec.choice[0]], rec.weights[0])
    np.testing.assert_allclose(r.gates.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(r.load.sum(-1), 1.0, atol=1e-6)
    counts = np.stack([np.bincount(r.choice[i].ravel(), minlength=4) for i in range(3)])
    np.testing.assert_allclose(r.load, counts / (2 * T))
    assert r.uniform == 0.25 and (r.entropy >= 0).all() and (r.entropy <= 2 + 1e-6).all()


def test_force_changes_exactly_the_forced_token_and_what_follows(lm):
    inp = lm.encode(TEXT)
    base, _ = route_text(lm, inp)
    pos, layer = 3, 1
    expert = next(e for e in range(4) if e not in base.choice[layer, pos])
    res = force_expert_run(lm, inp, layer, pos, expert)
    after = res["after"]
    assert after.choice[layer, pos, 0] == expert
    assert after.choice[layer, pos, 1] == base.choice[layer, pos, 0]  # the router's first pick keeps a slot
    np.testing.assert_array_equal(after.choice[:layer + 1, :pos], base.choice[:layer + 1, :pos])
    np.testing.assert_array_equal(after.choice[:, :pos], base.choice[:, :pos])  # causal: earlier tokens as they were
    np.testing.assert_array_equal(after.choice[:layer], base.choice[:layer])  # earlier layers as they were
    assert (layer, pos) in res["changed"]
    assert all(lay >= layer and tok >= pos for lay, tok in res["changed"])
    assert res["top_before"] != res["top_after"]
    assert abs(sum(p for _, p in res["top_before"]) - float(base_top(lm, inp, pos))) < 1e-5
    with pytest.raises(InputError, match="out of range"):
        force_expert_run(lm, inp, 3, 0, 0)


def base_top(lm, inp, pos) -> float:
    probs = torch.softmax(lm.forward(inp, records=False).logits[0, pos], -1)
    return probs.topk(5).values.sum().item()


def test_a_dense_model_is_refused_clearly():
    with pytest.raises(InputError, match="no mixture-of-experts"):
        route_text(load("random-decoder"), load("random-decoder").encode("abc"))


def test_specialisation_counts_first_choices_like_separate_runs():
    lm = load("lecture-moe")
    texts = [["[BOS]", "alvo", "is", "nine", "."], ["[BOS]", "how", "old", "is", "alvo", "?"],
             ["[BOS]", "vasko", "plopa", "vasko"]]
    classes = {"names": {"alvo"}, "punctuation": {".", "?"}, "number words": {"nine"}}
    table = specialisation(lm, texts, classes, batch=2)  # two batches, the first one padded
    first = {}  # (layer, expert, class) -> count, from one run per text
    for words in texts:
        run = lm.run(" ".join(words[1:]))
        assert run.tokens == words
        for rec in run.routers.values():
            for t, w in enumerate(words):
                for c, members in classes.items():
                    if w in members:
                        key = (rec.layer, int(rec.choice[0, t, 0]), c)
                        first[key] = first.get(key, 0) + 1
    assert table["counts"] == {"names": 2, "punctuation": 2, "number words": 1, "all": 15}
    for (layer, e, c), n in first.items():
        assert table["share"][layer, e, table["classes"].index(c)] == pytest.approx(n / table["counts"][c])
    np.testing.assert_allclose(table["share"].sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(table["overall"].sum(1), 1.0, atol=1e-6)
    rows = specialists(table, min_ratio=1.0)
    assert rows and all(r["share"] >= 0.25 for r in rows) and rows[0]["ratio"] >= rows[-1]["ratio"]
