"""A mixture of experts' backend comparison runs the fused backend on the reference's experts."""

import torch
from attnlab.analysis.machinery.backends import compare_backends, same_experts
from attnlab.model.hooks import capture
from attnlab.model.moe import force_expert
from attnlab.model.registry import load

from tests.model.helpers import tiny, tokens

MOE = dict(mlp="moe", n_experts=4, top_k=2, d_mlp=24)


def test_a_run_takes_the_pinned_experts_and_counts_the_tokens_it_would_route_otherwise():
    m = tiny(**MOE)
    x = tokens(8)
    with torch.no_grad(), capture(interventions={"blocks.0.mlp.hook_expert_choice": force_expert(3, [0, 1])}) as ref:
        m(x)
    own = None
    with torch.no_grad(), capture() as free:
        m(x)
        own = free.routers["blocks.0.mlp"][-1].choice[0, 3]
    flips: list[int] = []
    with torch.no_grad(), capture(interventions=same_experts(ref, flips)) as pinned:
        m(x)
    for site, recs in ref.routers.items():
        assert (pinned.routers[site][-1].choice == recs[-1].choice).all()
    assert len(flips) == 2  # one count per MoE layer
    assert flips[0] == (0 if sorted(own.tolist()) == [0, 1] else 1) and flips[1] == 0


def test_compare_backends_reports_flips_only_for_a_router():
    moe, dense = load("lecture-moe"), load("lecture-decoder")
    inputs = moe.encode("garo is seven . garo has a cat . how old is garo ?")
    rep = compare_backends(moe, inputs, "sdpa")
    assert rep["routing_flips"] == 0 and rep["max_abs_logits"] < 1e-4
    assert compare_backends(dense, dense.encode("garo is seven ."), "sdpa")["routing_flips"] is None
