"""One decoder's own path, step by step, for one chosen token (the Block page's walk):

    h₀ = token embedding (+ position embedding when the positions are learned or sinusoidal)
    per block: norm → attention → residual add → norm → MLP → residual add (the model's pre/post/peri rule;
    parallel: attention and MLP both read the block's input and are added together)
    final norm → LM head → next-token probabilities (temperature, top-k)

The walk is the model's own (`lm.walk`, model/walk.py: its modules called one at a time with the residual rules
written out), so the test that its logits equal `LoadedModel.forward`'s checks it against the model. Everything
returned is numpy or plain Python (picklable, cacheable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.generate import sampling_probs as model_sampling_probs
from attnlab.model.inputs import Inputs
from attnlab.model.walk import walk_stream as model_walk

TOP = 10  # next-token candidates kept


@dataclass(frozen=True)
class Step:
    """One stage of the walk at the chosen token: its vector [D] and norm."""

    layer: int  # −1: embeddings; L: after the last block (final norm, LM head)
    name: str
    vector: np.ndarray  # float64 [D]

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.vector))


@dataclass(frozen=True)
class BlockWalk:
    """The walk at one token: its stages, the residual stream's norm after each block, what each sub-layer
    adds, and the next-token prediction."""

    tokens: list[str]
    position: int
    norm_rule: str  # pre | post | peri
    norm_type: str  # layernorm | rmsnorm
    positional: str  # learned | sinusoidal | rope | alibi | none
    steps: list[Step]
    resid_norms: np.ndarray  # float64 [L + 1]: ‖h_l‖, h_0 the embedding output, h_l after block l−1
    attn_delta: np.ndarray  # float64 [L]: ‖what attention adds to the stream‖ at the token
    mlp_delta: np.ndarray  # float64 [L]: ‖what the MLP adds‖
    logits: np.ndarray  # float64 [V] at the token
    max_abs_vs_model: float  # max |walk logits − LoadedModel.forward logits| over every position
    top_ids: list[int]
    top_tokens: list[str]
    top_probs: np.ndarray  # float64 [TOP] under the temperature and top-k
    temperature: float
    top_k: int | None

    @property
    def n_layers(self) -> int:
        return len(self.attn_delta)


def sampling_probs(logits, temperature: float, top_k: int | None) -> np.ndarray:
    """The next-token distribution [V] as Generate draws from it: softmax(logits / temperature) over the top-k
    logits (temperature 0 is greedy: the plain softmax, from which the top token is taken)."""
    x = torch.from_numpy(np.asarray(logits, dtype=np.float64))  # [V]
    return model_sampling_probs(x, temperature, top_k).numpy()


def _vec(x: torch.Tensor, t: int) -> np.ndarray:
    return x[0, t].detach().double().cpu().numpy()  # [B, T, D] -> [D]


def walk_stream(net, ids: torch.Tensor, t: int, record: bool = True) -> tuple[torch.Tensor, list[Step]]:
    """The model's own walk (model/walk.py) of a Decoder `net` over ids [1, T]: logits [1, T, V] and, when
    `record`, the Steps at position t."""
    steps: list[Step] = []
    keep = (lambda layer, name, x: steps.append(Step(layer, name, _vec(x, t)))) if record else (lambda *a: None)
    return model_walk(net, ids, keep), steps


def deltas(steps: list[Step], n_layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(‖h_l‖ [L + 1], ‖attention update‖ [L], ‖MLP update‖ [L]) read from a walk's steps."""
    by = {(s.layer, s.name.split(" (")[0]): s.norm for s in steps}
    h0 = next(s.norm for s in steps if s.name.startswith("h₀"))
    resid = np.array([h0] + [by[(i, "residual after MLP")] for i in range(n_layers)])
    attn = np.array([by[(i, "attention output")] for i in range(n_layers)])
    mlp = np.array([by[(i, "MLP output")] for i in range(n_layers)])
    return resid, attn, mlp


@torch.no_grad()
def block_walk(lm, inputs: Inputs, position: int = -1, temperature: float = 1.0, top_k: int | None = None) -> BlockWalk:
    """The walk of a decoder `lm` (a LoadedModel) over `inputs` at token `position` (−1: the last)."""
    if not lm.predicts_next_token or getattr(lm.model, "lm_head", None) is None:
        raise ValueError("the block walk needs a decoder with an LM head")
    inputs = inputs.to(lm.device)
    T = inputs.ids.shape[1]
    t = position % T if -T <= position < T else None
    if t is None:
        raise IndexError(f"token {position} is outside the text's {T} tokens")
    logits, steps = walk_stream(lm.model, inputs.ids, t)  # [1, T, V]
    ref = lm.forward(inputs, backend="eager", records=False).logits  # the one run path: [1, T, V]
    gap = float((logits.double() - ref.double()).abs().max())
    resid, attn, mlp = deltas(steps, lm.n_blocks)
    row = logits[0, t].double().cpu().numpy()  # [V]
    p = sampling_probs(row, temperature, top_k)
    top = np.argsort(-p, kind="stable")[:TOP]
    return BlockWalk(list(inputs.tokens), t, lm.cfg.norm, lm.cfg.norm_type, lm.cfg.positional, steps, resid, attn,
                     mlp, row, gap, top.tolist(), [lm.label(i) for i in top], p[top], temperature, top_k)
