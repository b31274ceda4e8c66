"""One place each: the sampling distribution (model.generate.sampling_probs) and the softmax (model.softmax) are
what generation, the Generate trace, the Block page, Step by step and the router read."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
from attnlab.model.generate import next_token, sampling_probs
from attnlab.model.softmax import masked_softmax, shifted_exp

ROOT = Path(__file__).resolve().parents[2]


def test_sampling_probs_temperature_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.5, -1.0]], dtype=torch.float64)
    assert torch.allclose(sampling_probs(logits, 0.0, 2), torch.softmax(logits, -1))  # greedy: plain softmax
    p = sampling_probs(logits, 2.0, 3)  # ties at the 3rd logit are kept
    want = torch.softmax(torch.tensor([1.0, 0.5, 0.25, 0.25, -torch.inf], dtype=torch.float64), -1)
    assert torch.allclose(p, want[None]) and p[0, 4] == 0
    g = torch.Generator().manual_seed(0)
    draws = {int(next_token(logits.float(), 1.0, 1, g)) for _ in range(20)}
    assert draws == {0}  # top-1 sampling is greedy


def test_block_and_generation_read_the_one_sampling_distribution():
    from attnlab.analysis.machinery import block_walk as block

    logits = np.array([3.0, 1.0, 0.0, -2.0])
    for t, k in ((0.0, None), (0.7, None), (1.3, 2), (1.0, 10)):
        np.testing.assert_allclose(block.sampling_probs(logits, t, k),
                                   sampling_probs(torch.from_numpy(logits), t, k).numpy(), rtol=0, atol=0)
    for f in ("analysis/probes/generation.py", "analysis/machinery/block_walk.py"):  # no k-th logit cut of their own
        src = (ROOT / f).read_text()
        assert "kth" not in src and "x / temperature" not in src, f


def test_no_hand_rolled_softmax_left():
    for f in ("analysis/attention/stepwise.py", "model/router_record.py", "analysis/machinery/block_walk.py", "analysis/probes/generation.py"):
        tree = ast.parse((ROOT / f).read_text())
        exps = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "exp"]
        assert exps == [], f


def test_shifted_exp_is_the_softmax_numerators():
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    mask = np.array([[True, True, False], [False, False, False]])
    e = shifted_exp(x, mask)
    np.testing.assert_allclose(e[0], [np.exp(-1.0), 1.0, 0.0]) and np.testing.assert_array_equal(e[1], 0)
    np.testing.assert_allclose(masked_softmax(x, mask)[0], e[0] / e[0].sum())


def test_router_probs_and_explain_weight_use_the_softmax():
    from attnlab.analysis.attention.stepwise import attention_steps, explain_weight
    from attnlab.model.router_record import RouterRecord

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(1, 5, 4)).astype(np.float32)  # [batch, T, experts]
    rec = RouterRecord(site="blocks.0.mlp", stack="decoder", layer=0, logits=logits, choice=np.argsort(-logits, -1)[..., :2],
                       weights=np.full((1, 5, 2), 0.5, np.float32))
    np.testing.assert_allclose(rec.probs(), masked_softmax(logits[0].astype(np.float64)), atol=1e-7)
    q, k, v = (rng.normal(size=(4, 3)) for _ in range(3))
    steps = attention_steps(q, k, v, mask=np.tril(np.ones((4, 4), bool)))
    d = explain_weight(steps, 2, 1)
    assert d["exp"][3] == 0 and np.isclose(d["exp"][1] / d["total"], d["weight"])
