"""The graph that edge attribution patching scores: senders (what writes into the residual stream) and receivers
(what reads it), and which sender is upstream of which receiver.

Senders: `embed` (the stream entering block 0: token and positional embeddings), each head's output
`blocks.{L}.attn.head.{H}` (hook_result: the head's share of the output projection, no bias) and each MLP
`blocks.{L}.mlp` (hook_mlp_out). Receivers: each query head's q input `blocks.{L}.attn.head.{H}.q`, each k/v
head's k and v inputs (`blocks.{L}.attn.head.{H}.k` with one k/v head per query head; grouped-query attention:
`blocks.{L}.attn.kv_head.{G}.k`, read by query heads G·group … G·group + group − 1), each MLP's input
`blocks.{L}.mlp.in`, and `logits` (the final residual stream). The output biases belong to no node: they are the
same in every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from attnlab.model.inputs import InputError


@dataclass(frozen=True)
class Graph:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    parallel: bool  # attention and MLP read the same stream (GPT-NeoX, Phi): a layer's heads do not feed its MLP

    @classmethod
    def of(cls, lm) -> Graph:
        """The graph of a loaded decoder whose blocks can run with split inputs (pre-norm or parallel)."""
        cfg = lm.cfg
        if not (lm.predicts_next_token and lm.capabilities.converted):
            raise InputError(f"{lm.name} is not one of our decoders; circuit discovery runs converted decoder-only "
                             "models")
        if cfg.norm not in ("pre", "parallel"):
            raise InputError(f"{lm.name} is {cfg.norm}-norm: a norm stands between its sub-layers and the stream, so "
                             "the stream is no sum of head and MLP outputs; circuit discovery needs pre-norm")
        return cls(cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.norm == "parallel")

    # -- nodes ----------------------------------------------------------------------------------------
    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def kv_name(self) -> str:
        return "head" if self.group == 1 else "kv_head"

    def sender(self, layer: int, head: int | None = None) -> int:
        """Index of head `head` of `layer` (None: the layer's MLP) among the senders (0 is embed)."""
        return 1 + layer * (self.n_heads + 1) + (self.n_heads if head is None else head)

    @property
    def senders(self) -> list[str]:
        out = ["embed"]
        for L in range(self.n_layers):
            out += [f"blocks.{L}.attn.head.{h}" for h in range(self.n_heads)] + [f"blocks.{L}.mlp"]
        return out

    def receiver(self, layer: int, kind: str, head: int = 0) -> int:
        """Index of a receiver: kind "q" (query head), "k" or "v" (k/v head), "mlp"; layer = n_layers: logits."""
        per = self.n_heads + 2 * self.n_kv_heads + 1
        offset = {"q": 0, "k": self.n_heads, "v": self.n_heads + self.n_kv_heads, "mlp": per - 1}[kind]
        return layer * per + offset + (head if kind != "mlp" else 0)

    @property
    def receivers(self) -> list[str]:
        out = []
        for L in range(self.n_layers):
            out += [f"blocks.{L}.attn.head.{h}.q" for h in range(self.n_heads)]
            out += [f"blocks.{L}.attn.{self.kv_name}.{g}.{p}" for p in "kv" for g in range(self.n_kv_heads)]
            out.append(f"blocks.{L}.mlp.in")
        return out + ["logits"]

    # -- edges ----------------------------------------------------------------------------------------
    def valid(self) -> np.ndarray:
        """bool [n_senders, n_receivers]: True where the sender is upstream of the receiver."""
        S, R = len(self.senders), len(self.receivers)
        per = self.n_heads + 2 * self.n_kv_heads + 1
        out = np.zeros((S, R), dtype=bool)
        out[:, -1] = True  # every sender writes the final stream
        for L in range(self.n_layers):
            before = self.sender(L, 0)  # embed and every node of the layers below
            out[:before, L * per:(L + 1) * per] = True
            if not self.parallel:  # a layer's heads write the stream its MLP reads
                out[before:before + self.n_heads, self.receiver(L, "mlp")] = True
        return out

    @property
    def n_edges(self) -> int:
        return int(self.valid().sum())

    def edge_names(self, index: np.ndarray) -> list[tuple[str, str]]:
        """(from, to) of flat edge indices into the [n_senders, n_receivers] matrix."""
        s, r = self.senders, self.receivers
        R = len(r)
        return [(s[int(i) // R], r[int(i) % R]) for i in index]


def head_of(node: str) -> str | None:
    """`blocks.{L}.attn.head.{H}` of a sender or query receiver, else None (embed, MLPs, k/v heads of a group)."""
    parts = node.split(".")
    if len(parts) >= 5 and parts[2] == "attn" and parts[3] == "head":
        return ".".join(parts[:5])
    return None
