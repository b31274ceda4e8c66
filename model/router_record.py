"""RouterRecord: a picklable, torch-free (once read) record of one mixture-of-experts router in one forward pass.

The router's raw logits, the experts each token was sent to and the weights their outputs were mixed with
(the top-k router probabilities renormalised to sum to 1, as in Mixtral). Accessors derive the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from attnlab.model.record import OnHost, PicklesOnHost
from attnlab.model.softmax import masked_softmax


@dataclass
class RouterRecord(PicklesOnHost):
    site: str  # hook prefix, e.g. "blocks.0.mlp"
    stack: str
    layer: int
    # given as tensors during a forward (no copy, no sync), read as numpy (model.record.OnHost)
    logits: np.ndarray = OnHost()  # float32 [batch, T, n_experts] (hook_router_logits)
    choice: np.ndarray = OnHost()  # int64 [batch, T, top_k] (hook_expert_choice), best first unless forced
    weights: np.ndarray = OnHost()  # float32 [batch, T, top_k] mixing weights of the chosen experts, summing to 1
    q_offset: int = 0  # absolute position of the first token (a cached step)

    @property
    def n_experts(self) -> int:
        return self.logits.shape[-1]

    @property
    def top_k(self) -> int:
        return self.choice.shape[-1]

    @property
    def n_tokens(self) -> int:
        return self.logits.shape[1]

    def probs(self, batch: int = 0) -> np.ndarray:
        """Router softmax over every expert: float32 [T, n_experts]."""
        return masked_softmax(self.logits[batch].astype(np.float64)).astype(np.float32)  # [T, n_experts]

    def gates(self, batch: int = 0) -> np.ndarray:
        """The weight each token gives each expert: float32 [T, n_experts], zero for experts not chosen."""
        out = np.zeros((self.n_tokens, self.n_experts), dtype=np.float32)
        np.add.at(out, (np.arange(self.n_tokens)[:, None], self.choice[batch]), self.weights[batch])
        return out

    def entropy(self, batch: int = 0) -> np.ndarray:
        """Entropy of the router softmax per token, in bits: float32 [T] (0 = sure, log2 E = uniform)."""
        p = self.probs(batch).astype(np.float64)
        return -(p * np.log2(np.where(p > 0, p, 1.0))).sum(-1).astype(np.float32)

    def load(self, batch: int = 0) -> np.ndarray:
        """Share of the token slots each expert received: float32 [n_experts], summing to 1
        (uniform: 1 / n_experts)."""
        counts = np.bincount(self.choice[batch].ravel(), minlength=self.n_experts)
        return (counts / max(1, counts.sum())).astype(np.float32)
