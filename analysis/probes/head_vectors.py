"""One query row of one head as vectors: the query q, every key k_j and value v_j it may read, the scaled scores
q·k_j/√d, their softmax α and the output Σ_j α_j v_j, with the model's own output of that head (hook_z) beside it
— the lecture's softmax(QKᵀ/√d)·V written out for a single row, numbers exactly as the run computed them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.softmax import masked_softmax


@dataclass(frozen=True)
class HeadVectors:
    """Query row `query` of head `head` at `site`; every array is float64 except `z` (the model's float32)."""

    site: str
    head: int
    query: int
    keys: np.ndarray  # int [n] the key positions the query may see, in text order
    q: np.ndarray  # [d_head] the query vector (after RoPE / QK-norm, as the scores use it)
    k: np.ndarray  # [n, d_head] the key vectors k_j
    v: np.ndarray  # [n, d_head] the value vectors v_j
    scale: float  # 1/√d_head (the model's own)
    scores: np.ndarray  # [n] q·k_j · scale (soft-capped, cap·tanh(·/cap), as Gemma 2 does) (+ the positional bias)
    weights: np.ndarray  # [n] softmax of the scores
    output: np.ndarray  # [d_head] Σ_j α_j v_j
    z: np.ndarray  # [d_head] the model's own output of this head at this row (hook_z)

    @property
    def max_abs_vs_model(self) -> float:
        """max |Σ α v − hook_z|: the written-out row against the model's float32 output."""
        return float(np.abs(self.output - self.z).max())


def head_vectors(lm, inputs, site: str, head: int, query: int) -> HeadVectors:
    """The vectors of query row `query`, head `head` at attention site `site` of an eager run on `inputs`."""
    with torch.no_grad():
        cap = lm.forward(inputs, backend="eager", names=[f"{site}.hook_v", f"{site}.hook_z"]).capture
    rec = cap[site]
    if not 0 <= query < rec.q.shape[2]:
        raise ValueError(f"query {query} is outside the {rec.q.shape[2]} positions of {site}")
    kv = head // (rec.q.shape[1] // rec.k.shape[1])  # the k/v head this query head reads (GQA)
    keys = np.flatnonzero(rec.mask_for()[query])  # [n]: the keys this row may attend to
    q = np.asarray(rec.q[0, head, query], dtype=np.float64)  # [B, H, T, d] -> [d]
    k = np.asarray(rec.k[0, kv], dtype=np.float64)[keys]  # [B, Hkv, S, d] -> [n, d]
    v = cap.tensor(f"{site}.hook_v")[0, :, kv].double().cpu().numpy()[keys]  # [B, S, Hkv, d] -> [n, d]
    z = cap.tensor(f"{site}.hook_z")[0, query, head].float().cpu().numpy()  # [B, T, H, d] -> [d]
    scores = rec.scale * (k @ q)  # [n]
    if rec.softcap is not None:  # Gemma 2 caps the scaled scores before the bias
        scores = np.tanh(scores / rec.softcap) * rec.softcap
    if rec.bias is not None:
        scores = scores + np.asarray(rec.bias[head], dtype=np.float64)[query, keys]  # ALiBi / T5 bias [T, S] -> [n]
    weights = masked_softmax(scores[None, :], np.ones((1, len(keys)), bool))[0]  # [1, n] -> [n]
    return HeadVectors(site, head, query, keys, q, k, v, float(rec.scale), scores, weights, weights @ v, z)
