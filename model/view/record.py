"""ViewRecord: one attention site of a transformers view — the weights transformers returned, nothing else.

Scores, q and k are not returned by transformers' `output_attentions`, so they are absent: asking for them
raises InputError with one line saying so. Everything that reads weights (pattern, mask, head statistics,
rollout, flow) works as on a converted model's record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from attnlab.model.inputs import InputError
from attnlab.model.record import AttentionRecord

NO_QK = ("a transformers view records attention weights only: scores, q and k are not returned by transformers "
         "(load a converted family for them)")


@dataclass
class ViewRecord(AttentionRecord):
    """An AttentionRecord whose q and k are None and whose pattern_full holds the weights [1, H, q, k]."""

    @property
    def n_heads(self) -> int:
        return self.pattern_full.shape[1]

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def q_len(self) -> int:
        return self.pattern_full.shape[2]

    @property
    def k_len(self) -> int:
        return self.pattern_full.shape[3]

    def raw_qk(self, head=None, window=None, batch: int = 0) -> np.ndarray:
        raise InputError(NO_QK)

    def keys(self, heads=None, batch: int = 0, k0: int = 0, k1=None) -> np.ndarray:
        raise InputError(NO_QK)

    def scores(self, head=None, window=None, batch: int = 0) -> np.ndarray:
        raise InputError(NO_QK)


def view_records(attn: dict[str, tuple], arch: str, causal: bool) -> dict[str, ViewRecord]:
    """Records per site, in the order a forward runs them, from transformers' attention tuples.

    attn: {"self": (L × [1, H, T, T])} for a decoder or an encoder; {"encoder", "decoder", "cross"} tuples for an
    encoder–decoder. The mask is the model kind's own (causal for a decoder's self-attention, none otherwise)."""
    def rec(site, stack, layer, kind, weights, mask_causal):
        w = weights.detach().float().cpu().numpy()  # [1, H, q, k]
        q, k = w.shape[-2:]
        mask = np.tril(np.ones((q, k), dtype=bool), k - q)[None] if mask_causal else None  # [1, q, k]
        return ViewRecord(site, stack, layer, kind, "eager", "transformers eager", float("nan"), 0, None, None,
                          mask, pattern_full=w)

    out: dict[str, ViewRecord] = {}
    if arch != "encdec":
        stack = "decoder" if arch == "decoder" else "encoder"
        for i, w in enumerate(attn["self"]):
            out[f"blocks.{i}.attn"] = rec(f"blocks.{i}.attn", stack, i, "self", w, causal)
        return out
    for i, w in enumerate(attn["encoder"]):
        out[f"encoder.blocks.{i}.attn"] = rec(f"encoder.blocks.{i}.attn", "encoder", i, "self", w, False)
    for i, (w, c) in enumerate(zip(attn["decoder"], attn["cross"])):
        out[f"decoder.blocks.{i}.attn"] = rec(f"decoder.blocks.{i}.attn", "decoder", i, "self", w, True)
        out[f"decoder.blocks.{i}.cross_attn"] = rec(f"decoder.blocks.{i}.cross_attn", "decoder", i, "cross", c, False)
    return out
