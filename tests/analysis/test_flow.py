import numpy as np
import pytest
from attnlab.analysis.attention.flow import MAX_TOKENS, attention_flow
from attnlab.analysis.attention.rollout import attention_rollout, layer_matrix
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

A1 = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
A2 = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.1, 0.6, 0.3]])


def test_one_layer_flow_is_the_attention_row():
    p = A1[None, None]
    # residual 0.5: Â[2] = .5·[0, 0, 1] + .5·[.2, .3, .5] = [.1, .15, .75]
    np.testing.assert_allclose(attention_flow(p, 2, normalize=False), [0.1, 0.15, 0.75], atol=1e-7)


def test_three_token_two_layer_graph_by_hand():
    p = np.stack([A1, A2])[:, None]  # [2, 1, 3, 3]
    # paths k -> (1, j) -> (2, 2) share no edge: flow(k) = Σ_j min(A1[j, k], A2[2, j])
    # k=0: min(1, .1) + min(.5, .6) + min(.2, .3) = .8;  k=1: 0 + .5 + .3 = .8;  k=2: min(.5, .3) = .3
    flows = attention_flow(p, 2, residual=0.0, normalize=False)
    np.testing.assert_allclose(flows, [0.8, 0.8, 0.3], atol=1e-7)
    np.testing.assert_allclose(attention_flow(p, 2, residual=0.0), np.array([0.8, 0.8, 0.3]) / 1.9, atol=1e-7)
    # unlike rollout, A2·A1 row 2 = [.46, .39, .15]
    np.testing.assert_allclose(attention_rollout(p, residual=0.0)[2], [0.46, 0.39, 0.15], atol=1e-15)


def lp_max_flow(mats, source, sink):
    """Max-flow of the layered graph by linear programming (an independent check)."""
    n_layers, t, _ = mats.shape
    edges = [((layer) * t + k, (layer + 1) * t + q, mats[layer, q, k])
             for layer in range(n_layers) for q in range(t) for k in range(t)]
    n = (n_layers + 1) * t
    flow_in = np.zeros((n, len(edges)))
    for e, (u, v, _) in enumerate(edges):
        flow_in[v, e] += 1
        flow_in[u, e] -= 1
    inner = [x for x in range(n) if x not in (source, sink)]
    res = linprog(-flow_in[sink], A_eq=flow_in[inner], b_eq=np.zeros(len(inner)),
                  bounds=[(0, c) for _, _, c in edges], method="highs")
    assert res.status == 0
    return -res.fun


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), layers=st.integers(1, 3), t=st.integers(2, 4), residual=st.floats(0, 1),
       causal=st.booleans())
def test_flow_matches_a_linear_program(seed, layers, t, residual, causal):
    x = np.random.default_rng(seed).normal(size=(layers, 2, t, t)) * 2
    if causal:
        x = np.where(np.tril(np.ones((t, t), bool)), x, -np.inf)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = seed % t
    flows = attention_flow(p, q, residual, normalize=False)
    mats = layer_matrix(p, residual)
    want = [lp_max_flow(mats, k, layers * t + q) for k in range(t)]
    np.testing.assert_allclose(flows, want, atol=1e-6)
    if causal:
        assert (flows[q + 1:] == 0).all()


def test_flow_refuses_long_inputs_naming_the_limit():
    t = MAX_TOKENS + 1
    p = np.full((1, 1, t, t), 1 / t)
    with pytest.raises(ValueError, match=f"T ≤ {MAX_TOKENS}"):
        attention_flow(p, 0)
    with pytest.raises(ValueError, match="query"):
        attention_flow(A1[None, None], 3)
