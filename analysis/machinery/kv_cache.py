"""Does a KV cache change anything? Cached vs uncached, as numbers (no verdicts: analysis.machinery.checks judges them).

* `cached_chunks`: the text fed in cached chunks against one uncached pass — per-step logits and the
  attention rows stitched from the steps next to the full matrix (the one implementation of "cached vs
  uncached" for a text; `chunks` and `stitch` are its parts).
* `cache_generation`: greedy generation with and without the cache, step by step.
* `prefix_stability`: why a cache works — earlier tokens never change as later ones arrive.
* `cache_costs`: attention scores computed per generation step, with and without a cache.

Everything returned is numpy or plain Python (picklable, cacheable); torch stays inside.
"""

from __future__ import annotations

import numpy as np
import torch
from attnlab.model.cache import KVCache
from attnlab.model.record import AttentionRecord

NO_CACHE = "an encoder has no KV cache; pick a decoder or an encoder–decoder"
# prefixes prefix_stability runs: t = 1..32 takes 33 runs and 560 tokens (every prefix of 64 tokens took 2,144,
# most of the KV cache page's first visit); the point, causal rows never change, shows as well
PREFIX_TOKENS = 32


def chunks(T: int) -> list[tuple[int, int]]:
    """Step boundaries: a prefill of half the text, one 2-token chunk (a bottom-right mask), then 1 by 1."""
    first = max(1, T // 2)
    bounds = [(0, first)]
    if first + 2 <= T:
        bounds.append((first, first + 2))
    start = bounds[-1][1]
    bounds += [(t, t + 1) for t in range(start, T)]
    return bounds


def stitch(step_records: list[AttentionRecord], T: int) -> np.ndarray:
    """Place each cached step's rows at their absolute offset: [H, T, K] (K = the full key length)."""
    last = step_records[-1]
    H, K = last.n_heads, last.k_len
    out = np.zeros((H, T, K), dtype=np.float32)
    for r in step_records:
        out[:, r.q_offset : r.q_offset + r.q_len, : r.k_len] = r.pattern()
    return out


@torch.no_grad()
def cached_chunks(lm, inputs, backend: str = "sdpa") -> dict:
    """The text run in cached chunks (`chunks`) against one uncached pass, both under `backend`.

    Returns the step `bounds`; per step {start, stop, max_abs_logits, argmax_equal} (its logits vs the
    same rows of the uncached pass); `logits_scale`, the largest |logit| of the uncached pass; per decoder
    site {stitched [H, T, K], full [H, T, K], kind, layer, kernels, max_abs_pattern}; and the worst
    |Δ| of logits and of patterns over all steps and sites.
    """
    if not lm.has_cache:
        raise ValueError(NO_CACHE)
    full = lm.forward(inputs, backend=backend)
    T = inputs.ids.shape[1]
    cache, bounds, steps, step_records = KVCache(), chunks(T), [], {}
    for a, b in bounds:
        out = lm.forward(inputs.span(a, b), backend=backend, cache=cache)
        for site in out.capture.sites:
            step_records.setdefault(site, []).append(out.capture[site])
        ref = full.logits[:, a:b]
        steps.append({"start": a, "stop": b, "max_abs_logits": float((out.logits - ref).abs().max()),
                      "argmax_equal": bool((out.logits.argmax(-1) == ref.argmax(-1)).all())})
    sites = {}
    for site, recs in step_records.items():
        if sum(r.q_len for r in recs) != T or recs[0].stack == "encoder":  # the encoder ran once over the source
            continue
        stitched, whole = stitch(recs, T), full.capture[site].pattern()
        sites[site] = {"stitched": stitched, "full": whole, "kind": recs[0].attn_type, "layer": recs[0].layer,
                       "kernels": sorted({r.kernel for r in recs}),
                       "max_abs_pattern": float(np.abs(stitched - whole).max())}
    return {"backend": backend, "bounds": bounds, "steps": steps, "sites": sites,
            "logits_scale": float(full.logits.abs().max()),
            "max_abs_logits": max(s["max_abs_logits"] for s in steps),
            "max_abs_pattern": max(s["max_abs_pattern"] for s in sites.values())}


@torch.no_grad()
def cache_generation(lm, inputs, n_new: int, backend: str = "sdpa") -> dict:
    """Greedy generation of up to `n_new` tokens with and without the cache (no stop at EOS).

    Returns both id lists (prompt first), the generated labels, `n_different` (positions whose ids differ,
    plus any difference in length), and per step {step, position, max_abs_logits (cached − uncached
    next-token logits), scale (largest |uncached logit|), cached_token, uncached_token, same_token}.
    A prompt that already fills the model's context gives no steps.
    """
    if not lm.has_cache:
        raise ValueError(NO_CACHE)
    la: list[torch.Tensor] = []
    lb: list[torch.Tensor] = []
    a = lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=True, step_logits=la,
                    stop_at_eos=False)[0]
    b = lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=False, step_logits=lb,
                    stop_at_eos=False)[0]
    T0 = inputs.ids.shape[1]
    steps = []
    for s, (x, y) in enumerate(zip(la, lb)):
        ta, tb = a[T0 + s], b[T0 + s]
        steps.append({"step": s, "position": T0 + s, "max_abs_logits": float((x - y).abs().max()),
                      "scale": float(y.abs().max()), "cached_token": lm.label(ta), "uncached_token": lm.label(tb),
                      "same_token": ta == tb})
    n = min(len(a), len(b))
    n_different = sum(x != y for x, y in zip(a[:n], b[:n])) + abs(len(a) - len(b))
    return {"backend": backend, "prompt_len": T0, "cached_ids": a, "uncached_ids": b, "steps": steps,
            "n_different": int(n_different), "same_length": len(a) == len(b),
            "max_abs_logits": max((s["max_abs_logits"] for s in steps), default=0.0),
            "cached": [lm.label(i) for i in a[T0:]], "uncached": [lm.label(i) for i in b[T0:]]}


def cache_costs(prompt_len: int, n_steps: int, n_sites: int, n_heads: int) -> dict:
    """Attention-score cells computed by generation, cumulative per step: without a cache step s
    recomputes the whole (T0+s)×(T0+s) matrix; with one it computes the prompt once, then one new row of
    T0+s scores per step (O(T) instead of O(T²))."""
    T = prompt_len + np.arange(n_steps)  # sequence length fed at each step
    per = n_sites * n_heads
    uncached = np.cumsum(T.astype(np.int64) ** 2) * per
    cached = np.cumsum(np.where(np.arange(n_steps) == 0, T.astype(np.int64) ** 2, T)) * per
    return {"steps": np.arange(n_steps), "cached": cached, "uncached": uncached}


@torch.no_grad()
def prefix_stability(lm, inputs, backend: str = "eager", max_len: int = PREFIX_TOKENS) -> dict:
    """Why a cache works: run the text uncached on every prefix 0..t and compare, for the tokens already
    there, their keys, values (as hook tensors) and attention rows with the full run's. Causal attention
    makes them identical: later tokens never change earlier ones.

    Returns lengths [n] and per length the max |Δ| over all sites of earlier rows, keys and values.
    """
    if not lm.has_cache:
        raise ValueError("an encoder attends both ways: later tokens do change earlier rows, so no cache")
    ids = inputs.ids[:, :max_len]
    T = ids.shape[1]
    names = ["*.hook_k", "*.hook_v"]

    def run(t):
        cap = lm.forward(inputs.span(0, t), backend=backend, names=names).capture
        dec = [s for s in cap.sites if cap[s].attn_type == "self" and cap[s].stack == "decoder"]
        return cap, dec

    full, sites = run(T)
    lengths, d_rows, d_k, d_v = [], [], [], []
    for t in range(1, T + 1):
        cap, _ = run(t)
        r = k = v = 0.0
        for s in sites:
            r = max(r, float(np.abs(cap[s].pattern() - full[s].pattern(window=(0, t, 0, t))).max()))
            k = max(k, float((cap.tensor(f"{s}.hook_k") - full.tensor(f"{s}.hook_k")[:, :t]).abs().max()))
            v = max(v, float((cap.tensor(f"{s}.hook_v") - full.tensor(f"{s}.hook_v")[:, :t]).abs().max()))
        lengths.append(t)
        d_rows.append(r)
        d_k.append(k)
        d_v.append(v)
    return {"lengths": np.array(lengths), "rows": np.array(d_rows), "keys": np.array(d_k),
            "values": np.array(d_v), "truncated": inputs.ids.shape[1] > T, "T": T}
