"""What a model attends to while it generates: `generation_trace` generates with capture on and keeps, per
step, the new token's attention row at every decoder site, with the most likely next tokens.

Everything returned is numpy or plain Python (picklable, cacheable); torch stays inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from attnlab.model import hooks
from attnlab.model.generate import sampling_probs

TOP_K = 5


@dataclass
class GenTrace:
    """One generation: every token, and per step the new token's attention row at every site.

    Step s is the forward pass that produced token `prompt_len + s`; its query is position
    `prompt_len + s − 1` (the last token fed), so its row is that position's attention to the context.
    """

    tokens: list[str]  # prompt + generated labels
    ids: list[int]
    prompt_len: int
    src_tokens: list[str] | None
    sites: list[str]  # decoder sites (self, then cross per layer)
    kinds: dict[str, str]  # site -> "self" | "cross"
    layers: dict[str, int]
    rows: dict[str, np.ndarray]  # site -> float32 [steps, H, K]: K = final length (self) or S (cross); 0 past the step
    top_tokens: list[list[str]]  # [steps][TOP_K] most likely next tokens (after temperature and top-k)
    top_probs: np.ndarray  # float [steps, TOP_K]
    chosen_prob: np.ndarray  # float [steps]: probability of the token that was picked
    kernels: list[str] = field(default_factory=list)
    temperature: float = 0.0
    top_k: int | None = None
    seed: int | None = None
    stopped_at_eos: bool = False

    @property
    def n_steps(self) -> int:
        return len(self.chosen_prob)

    @property
    def new_tokens(self) -> list[str]:
        return self.tokens[self.prompt_len:]

    def query_position(self, step: int) -> int:
        return self.prompt_len + step - 1

    def step_matrix(self, site: str, head: int | None = None) -> np.ndarray:
        """[steps, K] rows of one head (or the head mean when head is None)."""
        r = self.rows[site]
        return r.mean(1) if head is None else r[:, head]


@torch.no_grad()
def generation_trace(lm, inputs, n_new: int, temperature: float = 0.0, top_k: int | None = None,
                     seed: int | None = None, backend: str = "eager", use_cache: bool = True) -> GenTrace:
    """Generate up to `n_new` tokens with capture on; keep each step's new-token row per decoder site."""
    if n_new < 1:
        raise ValueError(f"generate at least one token, got {n_new}")
    eos = getattr(lm.tokenizer, "eos_id", None)
    step_logits: list[torch.Tensor] = []
    with hooks.capture() as cap:
        ids, _ = lm.generate("", n_new, inputs=inputs, temperature=temperature, top_k=top_k, seed=seed,
                             use_cache=use_cache, backend=backend, step_logits=step_logits)
    T0 = inputs.ids.shape[1]
    n_steps = len(step_logits)
    if n_steps == 0:
        raise ValueError(f"the prompt already fills the model's context ({lm.context:,} tokens here); shorten it")
    final = T0 + n_steps - 1  # keys seen by the last step
    # the encoder ran once: not a step (and not one even when generation stopped after one step)
    sites = [s for s in cap.sites if len(cap.steps(s)) >= n_steps and cap.steps(s)[0].stack != "encoder"]
    rows, kinds, layers, kernels = {}, {}, {}, set()
    for site in sites:
        recs = cap.steps(site)[-n_steps:]
        first = recs[0]
        K = first.k_len if first.attn_type == "cross" else final
        out = np.zeros((n_steps, first.n_heads, K), dtype=np.float32)
        for s, rec in enumerate(recs):
            row = rec.pattern(window=(rec.q_len - 1, rec.q_len, 0, rec.k_len))[:, 0]  # [H, k]
            out[s, :, : rec.k_len] = row
            kernels.add(rec.kernel)
        rows[site], kinds[site], layers[site] = out, first.attn_type, first.layer
    tops, top_p, chosen = [], np.zeros((n_steps, TOP_K)), np.zeros(n_steps)
    for s, lg in enumerate(step_logits):
        p = sampling_probs(lg[0], temperature, top_k)  # [V]
        pv, pi = p.topk(min(TOP_K, p.shape[-1]))
        tops.append([lm.label(i) for i in pi.tolist()])
        top_p[s, : len(pv)] = pv.float().cpu().numpy()
        chosen[s] = float(p[ids[T0 + s]])
    labels = list(inputs.tokens) + [lm.label(i) for i in ids[T0:]]
    return GenTrace(labels, ids, T0, inputs.src_tokens, sites, kinds, layers, rows, tops, top_p, chosen,
                    sorted(kernels), temperature, top_k, seed, eos is not None and ids[-1] == eos)
