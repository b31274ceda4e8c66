"""One decoder's own path, step by step, for one chosen token (the Block page's walk):

    h₀ = token embedding (+ position embedding when the positions are learned or sinusoidal)
    per block: norm → attention → residual add → norm → MLP → residual add (the model's pre/post/peri rule;
    parallel: attention and MLP both read the block's input and are added together)
    final norm → LM head → next-token probabilities (temperature, top-k)

`block_walk` recomputes the stream by calling the model's own modules (embeddings, norms, attention, MLP, LM
head) with the residual rules written out here, so the test that its logits equal `LoadedModel.forward`'s
checks this walk against the model. Everything returned is numpy or plain Python (picklable, cacheable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.generate import sampling_probs as model_sampling_probs
from attnlab.model.inputs import Inputs
from attnlab.model.masks import as_spec

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


def _sublayer(rule: str, x, f, n_in, n_out):
    """(new stream, what was added before any output norm) under the residual rule."""
    if rule == "pre":
        d = f(n_in(x))
        return x + d, d
    if rule == "post":
        d = f(x)
        return n_out(x + d), d
    d = n_out(f(n_in(x)))  # peri: the output norm is part of what is added
    return x + d, d


def walk_stream(net, ids: torch.Tensor, t: int, record: bool = True):
    """The step-by-step forward of a Decoder `net` over ids [1, T] (eager attention, the model's own mask):
    logits [1, T, V] and, when `record`, the Steps at position t."""
    cfg = net.cfg
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device)
    steps: list[Step] = []
    keep = (lambda layer, name, x: steps.append(Step(layer, name, _vec(x, t)))) if record else \
        (lambda *a: None)
    keep(-1, "token embedding", net.embed.tok(ids))
    x = net.embed(ids, pos)  # [1, T, D]
    keep(-1, "h₀ = embedding + position" if cfg.positional in ("learned", "sinusoidal") else "h₀ = embedding", x)
    ctxs = net.layer_ctxs(True, as_spec(None, net.default_mask), T, 0, None, "eager", None, pos)
    for i, (blk, ctx) in enumerate(zip(net.blocks, ctxs)):
        if cfg.norm == "parallel":  # attention and MLP both read x; both are added to it
            keep(i, "norm before attention", blk.ln_attn(x))
            a = blk.attn(blk.ln_attn(x), ctx)
            keep(i, "attention output", a)
            keep(i, "norm before MLP", blk.ln_mlp(x))
            m = blk.mlp(blk.ln_mlp(x))
            keep(i, "MLP output", m)
            x = x + a + m
            keep(i, "residual after MLP (attention and MLP added in parallel)", x)
            continue
        if cfg.norm != "post":
            keep(i, "norm before attention", blk.ln_attn(x))
        x, d = _sublayer(cfg.norm, x, lambda h, b=blk, c=ctx: b.attn(h, c), blk.ln_attn, blk.ln_attn_out)
        keep(i, "attention output", d)
        keep(i, "residual after attention" + (" (then normed)" if cfg.norm == "post" else ""), x)
        if cfg.norm != "post":
            keep(i, "norm before MLP", blk.ln_mlp(x))
        x, d = _sublayer(cfg.norm, x, blk.mlp, blk.ln_mlp, blk.ln_mlp_out)
        keep(i, "MLP output", d)
        keep(i, "residual after MLP" + (" (then normed)" if cfg.norm == "post" else ""), x)
    h = net.ln_f(x)
    keep(len(net.blocks), "final norm" if cfg.norm != "post" else "final stream (post-LN: no final norm)", h)
    logits = net.lm_head(h)  # [1, T, V]
    if net.logit_softcap is not None:  # Gemma 2
        logits = torch.tanh(logits / net.logit_softcap) * net.logit_softcap
    return logits, steps


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
    net = lm.model
    if not lm.predicts_next_token or getattr(net, "lm_head", None) is None:
        raise ValueError("the block walk needs a decoder with an LM head")
    inputs = inputs.to(lm.device)
    T = inputs.ids.shape[1]
    t = position % T if -T <= position < T else None
    if t is None:
        raise IndexError(f"token {position} is outside the text's {T} tokens")
    logits, steps = walk_stream(net, inputs.ids, t)
    ref = lm.forward(inputs, backend="eager", records=False).logits  # the one run path: [1, T, V]
    gap = float((logits.double() - ref.double()).abs().max())
    resid, attn, mlp = deltas(steps, len(net.blocks))
    row = logits[0, t].double().cpu().numpy()  # [V]
    p = sampling_probs(row, temperature, top_k)
    top = np.argsort(-p, kind="stable")[:TOP]
    return BlockWalk(list(inputs.tokens), t, lm.cfg.norm, lm.cfg.norm_type, lm.cfg.positional, steps, resid, attn,
                     mlp, row, gap, top.tolist(), [lm.label(i) for i in top], p[top], temperature, top_k)
