"""Generation: greedy, temperature and top-k sampling (seeded), with or without the KV cache."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from attnlab.model.cache import KVCache
from attnlab.model.inputs import Inputs


def sampling_probs(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """The distribution the next token is drawn from, over the last axis of `logits` ([..., V], computed in
    float32 or wider): softmax(logits / temperature) over the top-k logits (ties at the k-th kept); temperature 0
    is greedy, drawn from the plain softmax by taking its top token."""
    x = logits if logits.dtype == torch.float64 else logits.float()
    if temperature > 0:
        x = x / temperature
        if top_k is not None and 0 < top_k < x.shape[-1]:
            kth = torch.topk(x, top_k, dim=-1).values[..., -1:]  # [..., 1]
            x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def next_token(logits: torch.Tensor, temperature: float, top_k: int | None, gen: torch.Generator | None) -> torch.Tensor:
    """Pick ids [B] from last-position logits [B, V]: argmax at temperature 0, else a draw from sampling_probs. A
    seeded draw is made where its generator lives (the CPU: torch refuses a CPU generator for a CUDA tensor), so
    one seed draws the same way on every device."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = sampling_probs(logits, temperature, top_k)  # [B, V]
    if gen is not None and probs.device != gen.device:
        probs = probs.to(gen.device)  # [B, V] to the host: generation reads each step's token there anyway
    return torch.multinomial(probs, 1, generator=gen)[:, 0].to(logits.device)


def crosses_longrope(cfg, cached: int, total: int) -> bool:
    """True when `total` positions reach past longrope's original length but the `cached` ones did not."""
    return cfg.rope_scaling == "longrope" and cached <= cfg.rope_original_len < total


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, seed: int | None = None, use_cache: bool = True,
             backend: str | None = None, eos_id: int | None = None, src: torch.Tensor | None = None,
             src_mask: torch.Tensor | None = None, step_logits: list | None = None) -> torch.Tensor:
    """Extend `prompt` [B, T] by up to max_new_tokens ids; an encoder–decoder needs `src` [B, S].

    With the cache each step feeds only the new token; without it every step reruns the whole
    sequence. A longrope model recomputes once when the sequence first reaches past its original length
    (every key is then turned by the long factors, as transformers' Phi-3 generation does). `step_logits`, when given, receives each step's last-position logits [B, V].
    """
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must be ≥ 0")
    if not (temperature >= 0 and math.isfinite(temperature)):  # NaN fails both: it would have meant greedy
        raise ValueError(f"temperature must be a finite number ≥ 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be ≥ 1 (or none: every token), got {top_k}")
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    inputs = Inputs(prompt, [], src_ids=src, src_mask=src_mask)
    cache = KVCache() if use_cache else None
    ids, feed = prompt, prompt
    max_len = model.cfg.max_len
    for _ in range(max_new_tokens):
        if ids.shape[1] >= max_len:
            break
        if cache is not None and crosses_longrope(model.cfg, len(cache), ids.shape[1]):
            cache, feed = KVCache(), ids  # the cached keys turned by the short factors: recompute, as transformers
        out = model.forward_inputs(replace(inputs, ids=feed), cache=cache, backend=backend)
        logits = out.logits[:, -1]  # [B, V]
        if step_logits is not None:
            step_logits.append(logits.clone())
        nxt = next_token(logits, temperature, top_k, gen)[:, None]  # [B, 1]
        ids = torch.cat([ids, nxt], dim=1)
        feed = nxt if use_cache else ids
        if eos_id is not None and bool((nxt == eos_id).all()):
            break
    return ids
