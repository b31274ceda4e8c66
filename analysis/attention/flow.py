"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

The layered attention graph has (L+1)·T nodes, (l, t) for l = 0..L (0 = input tokens); the edge
(l−1, k) → (l, q) has capacity Â_l[q, k], the head-mean attention with the residual as in rollout,
Â_l = rownorm(residual·I + (1−residual)·mean_h A_l). The flow of input token k into output
position q is the maximum flow from node (0, k) to node (L, q), one max-flow problem per token.
"""

from __future__ import annotations

import numpy as np
from attnlab.analysis.attention.rollout import layer_matrix
from attnlab.analysis.attention.scores import check_patterns
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

MAX_TOKENS = 65  # exact max-flow per input token (65: [CLS] + lecture-vit's 8×8 patches); beyond this use rollout
CAPACITY_SCALE = 2**26  # capacities are rounded to multiples of 2^-26 ≈ 1.5e-8 (int32 max-flow)


def flow_graph(mats) -> csr_matrix:
    """Integer capacity matrix [(L+1)·T, (L+1)·T] of the layered graph; node (l, t) is l·T + t.

    mats [L, T, T] holds Â_l (rows = queries): edge (l−1, k) → (l, q) gets round(Â_l[q, k]·2^26).
    """
    n_layers, t, _ = mats.shape
    cap = np.rint(np.asarray(mats) * CAPACITY_SCALE).astype(np.int32)  # [L, q, k]
    layer, q, k = np.nonzero(cap)
    n = (n_layers + 1) * t
    return csr_matrix((cap[layer, q, k], (layer * t + k, (layer + 1) * t + q)), shape=(n, n))


def attention_flow(patterns, query: int, residual: float = 0.5, normalize: bool = True) -> np.ndarray:
    """Max-flow from each input token to output position `query`: patterns [L, H, T, T] -> [T].

    Abnar & Zuidema 2020, §3 ("attention flow"): flow(k) = maxflow((0, k) → (L, query)) in the
    graph above; exact for the capacities rounded to multiples of 2^-26, so each value is within
    (edges in a minimum cut)·2^-27 of the real-valued max-flow. normalize=True divides by the sum
    over tokens, as the paper's code does. Only for T ≤ MAX_TOKENS (T max-flow problems on L·T² edges).
    """
    a = check_patterns(patterns, ndim=4, square=True)
    n_layers, _, t, _ = a.shape
    if t > MAX_TOKENS:
        raise ValueError(f"attention flow is limited to T ≤ {MAX_TOKENS} tokens (exact max-flow per token); "
                         f"got T = {t}. Use analysis.attention.rollout.attention_rollout for longer inputs.")
    if not 0 <= query < t:
        raise ValueError(f"query {query} is outside 0..{t - 1}")
    graph = flow_graph(layer_matrix(a, residual, "mean"))  # [(L+1)·T, (L+1)·T]
    sink = n_layers * t + query
    flows = np.array([maximum_flow(graph, k, sink, method="dinic").flow_value for k in range(t)],
                     dtype=np.float64) / CAPACITY_SCALE
    if normalize and flows.sum() > 0:
        flows /= flows.sum()
    return flows
