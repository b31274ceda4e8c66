"""EAP-IG over activations (analysis/circuit/act_paths.py) on a tiny grouped-query Llama: a path point at the clean
end gives EAP's scores; each group's scores, summed, are complete (they add up to what patching that group's outputs
with their corrupted values changes, exactly as the path points grow); find_circuit runs it."""

import numpy as np
import pytest
import torch
from attnlab.analysis.circuit import find_circuit
from attnlab.analysis.circuit.act_paths import activation_scores, groups, n_chunks
from attnlab.analysis.circuit.find import setup
from attnlab.analysis.circuit.scores import alphas, default_steps, edge_scores, mean_gradient

from tests.analysis.interp_models import tiny_llama

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the rug"


@pytest.fixture(scope="module")
def runs():
    return setup(tiny_llama(), CLEAN, CORRUPT, "a", "b")


def test_groups_cover_every_sender_once(runs):
    found = groups(runs)
    g = runs.graph
    assert len(found) == 1 + 2 * g.n_layers and found[0] == (0, range(0, 1), None)
    assert sorted(s for _, r, _ in found for s in r) == list(range(len(g.senders)))
    assert found[3] == (1, range(g.sender(1, 0), g.sender(1, 0) + 6), "blocks.1.attn.hook_result")
    assert n_chunks(runs, 2) == 1 and n_chunks(runs, 10) == 3  # 7 groups × m rows, 24 a staircase


def test_the_clean_end_of_the_path_is_eap(runs):
    eap = edge_scores(runs, mean_gradient(runs, [1.0]))
    near = activation_scores(runs, [1e-6])  # every group a millionth of the way to its corrupted value
    assert np.abs(eap).max() > 1e-3
    np.testing.assert_allclose(near, eap, atol=1e-5 * np.abs(eap).max())


def test_each_group_is_complete(runs):
    """Σ over a group's senders and their receivers = M(clean, the group's outputs corrupted) − M(clean)."""
    scores = activation_scores(runs, alphas("eap-ig-act", 24))
    valid = runs.valid.cpu().numpy()
    exact, est = [], []
    for _, senders, _ in groups(runs):
        keep = valid.copy()
        keep[senders.start:senders.stop] = False  # every edge the group sends carries its corrupted value
        m = runs.circuit_m(torch.from_numpy(keep)[None].to(runs.valid.device))
        exact.append(float(m[0]) - runs.m["clean"])
        est.append(scores[senders.start:senders.stop].sum())
    exact, est = np.array(exact), np.array(est)
    print(f"largest group effect {np.abs(exact).max():.4f}, largest miss {np.abs(est - exact).max():.2e}")
    assert np.abs(exact).max() > 0.05  # the groups do move M
    np.testing.assert_allclose(est, exact, atol=2e-3 * np.abs(exact).max())


def test_find_circuit_with_activation_paths(runs):
    c = find_circuit(tiny_llama(), CLEAN, CORRUPT, "a", "b", method="eap-ig-act", curve=False)
    assert c.method == "eap-ig-act" and c.steps == default_steps("eap-ig-act") == 2
    assert np.array_equal(c.scores, activation_scores(runs, alphas("eap-ig-act")))
    g = runs.graph
    assert c.heads()["blocks.1.attn.head.4"] == pytest.approx(c.scores[g.sender(1, 4)].sum())
    assert 0 <= c.n_edges <= c.n_edges_total
