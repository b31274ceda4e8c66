"""Mixture of experts: router shapes and top-k exactness, the load-balancing loss on a hand case, the router
hooks and records, forced experts, eager ≡ sdpa and cached ≡ uncached with MoE blocks, sparse upcycling."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.checks import run_checks
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import Inputs
from attnlab.model.loaded import LoadedModel
from attnlab.model.moe import MoE, force_expert, load_balancing_loss, route, router_loss, upcycle
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

from tests.model.helpers import tiny, tokens

MOE = dict(mlp="moe", n_experts=4, top_k=2, d_mlp=24)


def test_config_validates_moe_fields():
    assert ModelConfig(**MOE).hidden == 24
    assert ModelConfig(mlp="moe", n_experts=4, expert_mlp="gelu", d_model=32).hidden == 128
    with pytest.raises(ValueError, match="n_experts"):
        ModelConfig(mlp="moe", n_experts=1)
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig(mlp="moe", n_experts=4, top_k=5)
    with pytest.raises(ValueError, match="expert_mlp"):
        ModelConfig(mlp="moe", n_experts=4, expert_mlp="relu")


def test_route_is_topk_of_softmax_renormalised():
    logits = torch.randn(3, 7, 6, generator=torch.Generator().manual_seed(0))
    probs, choice, weights = route(logits, 3)
    assert probs.shape == (3, 7, 6) and choice.shape == weights.shape == (3, 7, 3)
    ref = torch.argsort(logits, dim=-1, descending=True)[..., :3]  # top-k of the logits, best first
    assert torch.equal(choice, ref)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 7))
    expect = probs.gather(-1, ref) / probs.gather(-1, ref).sum(-1, keepdim=True)
    torch.testing.assert_close(weights, expect)


def test_load_balancing_loss_hand_case():
    # 4 tokens, 2 experts, top-1. Tokens 0-2 pick expert 0, token 3 expert 1: f = (3/4, 1/4).
    # Probabilities: logits (ln 3, 0) → (3/4, 1/4) three times, (0, ln 3) → (1/4, 3/4): P = (10/16, 6/16).
    # 2 · (3/4 · 10/16 + 1/4 · 6/16) = 2 · 36/64 = 1.125.
    z = torch.tensor([[math.log(3), 0.0]] * 3 + [[0.0, math.log(3)]])
    assert load_balancing_loss(z, 1).item() == pytest.approx(1.125, abs=1e-6)
    # Balanced routing gives k; a list of layers is pooled.
    assert load_balancing_loss([torch.zeros(8, 4)], 2).item() == pytest.approx(2.0, abs=1e-6)


def test_load_balancing_loss_equals_transformers():
    tr = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    layers = [torch.randn(12, 5, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    ours = load_balancing_loss(layers, 2)
    theirs = tr.load_balancing_loss_func(tuple(layers), 5, 2)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)


def test_router_hooks_and_records_equal_the_tensors():
    model = tiny(**MOE)
    x = tokens(9, B=2)
    assert "blocks.1.mlp.hook_router_logits" in model.hook_names()
    assert "blocks.1.mlp.hook_expert_choice" in model.hook_names()
    with hooks.capture("*.mlp.hook_*") as cap:
        model(x)
    assert sorted(cap.routers) == ["blocks.0.mlp", "blocks.1.mlp"]
    for i in range(2):
        rec = cap.routers[f"blocks.{i}.mlp"][0]
        logits = cap.tensor(f"blocks.{i}.mlp.hook_router_logits")
        choice = cap.tensor(f"blocks.{i}.mlp.hook_expert_choice")
        assert logits.shape == (2, 9, 4) and choice.shape == (2, 9, 2) and rec.layer == i
        np.testing.assert_array_equal(rec.logits, logits.numpy())
        np.testing.assert_array_equal(rec.choice, choice.numpy())
        np.testing.assert_allclose(rec.weights.sum(-1), 1.0, atol=1e-6)
        np.testing.assert_allclose(rec.probs(1), torch.softmax(logits[1], -1).numpy(), atol=1e-6)
        gates = rec.gates(0)
        assert (np.count_nonzero(gates, axis=1) == 2).all()
        np.testing.assert_allclose(rec.load(0).sum(), 1.0)
        assert (rec.entropy(0) <= 2.0 + 1e-6).all()  # log2(4)
    pickle.loads(pickle.dumps(cap.routers))  # torch-free


def test_moe_output_is_weighted_sum_of_chosen_experts():
    model = tiny(**MOE)
    moe = model.blocks[0].mlp
    x = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(3))
    _, choice, weights = route(moe.router(x), 2)
    expect = torch.stack([sum(weights[0, t, s] * moe.experts[int(choice[0, t, s])](x[0, t]) for s in range(2))
                          for t in range(5)])
    torch.testing.assert_close(moe(x)[0], expect, atol=1e-6, rtol=1e-5)


def test_forcing_an_expert_changes_routing_exactly_as_asked():
    model = tiny(**MOE)
    x = tokens(8)
    with hooks.capture() as base:
        y0 = model(x).logits
    before = base.routers["blocks.1.mlp"][0]
    new = next(e for e in range(4) if e not in before.choice[0, 3])
    with hooks.capture(interventions={"blocks.1.mlp.hook_expert_choice": force_expert(3, new)}) as cap:
        y1 = model(x).logits
    after = cap.routers["blocks.1.mlp"][0]
    assert after.choice[0, 3, 0] == new and after.choice[0, 3, 1] == before.choice[0, 3, 0]
    mask = np.ones(8, bool)
    mask[3] = False
    np.testing.assert_array_equal(after.choice[0, mask], before.choice[0, mask])  # the other tokens keep theirs
    p = before.probs()[3, after.choice[0, 3]]
    np.testing.assert_allclose(after.weights[0, 3], p / p.sum(), rtol=1e-5)
    np.testing.assert_array_equal(cap.routers["blocks.0.mlp"][0].choice, base.routers["blocks.0.mlp"][0].choice)
    torch.testing.assert_close(y1[0, :3], y0[0, :3])  # causal: earlier positions unchanged
    assert (y1[0, 3] - y0[0, 3]).abs().max() > 1e-4
    with hooks.capture(interventions={"blocks.0.mlp.hook_expert_choice": force_expert(2, [1, 0])}) as cap:
        model(x)
    assert cap.routers["blocks.0.mlp"][0].choice[0, 2].tolist() == [1, 0]
    with pytest.raises(ValueError, match="force 3 experts"):
        with hooks.capture(interventions={"blocks.0.mlp.hook_expert_choice": force_expert(2, [1, 0, 3])}):
            model(x)


def test_checks_pass_on_a_random_moe_decoder():
    """eager ≡ sdpa ≡ flash, cached ≡ uncached and the pattern invariants, as `attnlab check` runs them."""
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64,
                      positional="rope", shared_expert=True, **MOE)
    torch.manual_seed(0)
    lm = LoadedModel("random-moe", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    report = run_checks(lm, lm.encode("the cat sat on the mat because it was warm"))
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]
    run = lm.run("a small test")
    assert sorted(run.routers) == ["blocks.0.mlp", "blocks.1.mlp"]
    assert run.routers["blocks.0.mlp"].n_tokens == len(run.tokens)


def test_cached_steps_route_like_the_full_run():
    model = tiny(**MOE, positional="rope")
    from attnlab.model.cache import KVCache

    x = tokens(10)
    with hooks.capture() as full:
        y = model(x).logits
    cache = KVCache()
    with hooks.capture() as steps:
        parts = [model(x[:, :6], cache=cache).logits] + [model(x[:, t:t + 1], cache=cache).logits for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(parts, 1), y, atol=1e-5, rtol=1e-5)
    recs = steps.routers["blocks.1.mlp"]
    choice = np.concatenate([r.choice for r in recs], axis=1)
    np.testing.assert_array_equal(choice, full.routers["blocks.1.mlp"][0].choice)


def test_training_keeps_the_balance_loss_and_eval_does_not():
    model = tiny(**MOE, router_aux_coef=0.5)
    model.train()
    model(tokens(6))
    losses = [m.aux_loss for m in model.modules() if isinstance(m, MoE)]
    assert len(losses) == 2 and all(v.requires_grad for v in losses)
    assert router_loss(model).item() == pytest.approx(0.5 * sum(v.item() for v in losses) / 2, rel=1e-6)
    assert router_loss(tiny()) == 0.0


def test_upcycle_copies_dense_weights_and_slices_the_mlp():
    dense = tiny(mlp="gelu", d_mlp=64)
    moe = tiny(mlp="moe", n_experts=4, top_k=2, expert_mlp="gelu", d_mlp=16, seed=5)
    state = upcycle(moe, dense.state_dict())
    moe.load_state_dict(state)
    d = dense.state_dict()
    assert torch.equal(moe.blocks[0].attn.qkv.weight, d["blocks.0.attn.qkv.weight"])
    assert torch.equal(moe.blocks[1].mlp.experts[2].up.weight, d["blocks.1.mlp.up.weight"][32:48])
    assert torch.equal(moe.blocks[1].mlp.experts[2].down.weight, d["blocks.1.mlp.down.weight"][:, 32:48] * 4)
    # Every expert chosen with weight 1/4 would give back the dense MLP exactly.
    x = torch.randn(3, 32)
    mix = sum(e(x) for e in moe.blocks[0].mlp.experts) / 4
    torch.testing.assert_close(mix, dense.blocks[0].mlp(x), atol=1e-5, rtol=1e-4)
    assert upcycle(dense, d) is d


def test_record_of_lecture_style_inputs_is_per_run():
    model = tiny(**MOE)
    lm = LoadedModel("m", model, ByteTokenizer(add_bos=True), model.cfg, "random")
    fwd = lm.forward(Inputs(tokens(5), []))
    assert fwd.capture.routers["blocks.0.mlp"][0].choice.shape == (1, 5, 2)
