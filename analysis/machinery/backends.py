"""Do eager, sdpa and flash compute the same attention, and what does each cost? As numbers (no verdicts:
analysis.machinery.checks judges them).

* `compare_backends`: one input under a fused backend against eager — logits, hidden states and every
  site's pattern (the one implementation of "backend vs eager").
* `output_scale`: the size of what those comparisons compare.
* `recovery_report`: what a fused capture keeps (q, k) and how exactly its recomputed pattern matches eager.
* `device_summary`, `time_attention`: what this machine runs, and live kernel timings and peak memory.

Everything returned is numpy or plain Python (picklable, cacheable); torch stays inside.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import torch
from attnlab.model.config import BACKENDS
from attnlab.model.softmax import masked_softmax_torch

# The autograd profiler (peak memory on the CPU) prints "USDT: … profiler_start / profiler_stop" to stderr on every
# call below kineto's log level 6; kineto reads the level when the profiler first starts.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def _max_abs(a, b) -> float:
    if a is None or b is None:
        return 0.0
    if torch.is_tensor(a):
        return float((a.float() - b.float()).abs().max()) if a.dtype != b.dtype else float((a - b).abs().max())
    return float(np.abs(a - b).max())


@torch.no_grad()
def same_experts(cap, flips: list[int]) -> dict | None:
    """Interventions that route every token of a run to the experts `cap`'s run chose (None: no router); each
    appends to `flips` how many tokens the run would have routed otherwise (a discrete choice that a last-bit
    difference can flip)."""
    if not cap.routers:
        return None

    def pin(chosen):
        def fn(choice: torch.Tensor, name: str) -> torch.Tensor:
            want = torch.as_tensor(chosen, device=choice.device)  # [B, T, top_k]
            flips.append(int((choice.sort(-1).values != want.sort(-1).values).any(-1).sum()))
            return want.clone()
        return fn

    return {f"{site}.hook_expert_choice": pin(recs[-1].choice) for site, recs in cap.routers.items()}


def compare_backends(lm, inputs, other: str, ref: str = "eager", ref_lm=None) -> dict:
    """Max |Δ| of logits, hidden states and every site's pattern between `ref` and `other`; `scale` is the
    largest |logit| of the `ref` run (|hidden state| for a model without logits), `kernels` what `other` ran.
    `ref_lm` runs the reference instead of `lm` (the float32 copy of a 16-bit model); outputs compare in float32.
    A mixture of experts runs `other` on the reference's experts (the attention is what is compared);
    `routing_flips` counts the tokens (over all MoE layers) whose experts `other` would have chosen otherwise
    (None without a router)."""
    out_a = (ref_lm or lm).forward(inputs, backend=ref)
    flips: list[int] = []
    pinned = same_experts(out_a.capture, flips)
    out_b = lm.forward(inputs, backend=other, interventions=pinned)
    cap_a, cap_b = out_a.capture, out_b.capture
    per_site = {s: _max_abs(cap_a[s].pattern(), cap_b[s].pattern()) for s in cap_a.sites}
    scale_ref = out_a.logits if out_a.logits is not None else out_a.hidden
    return {
        "backend": other, "reference": ref,
        "scale": float(scale_ref.float().abs().max()),
        "max_abs_logits": _max_abs(out_a.logits, out_b.logits),
        "max_abs_hidden": _max_abs(out_a.hidden, out_b.hidden),
        "max_abs_pattern": max(per_site.values(), default=0.0),
        "per_site": per_site,
        "kernels": sorted({cap_b[s].kernel for s in cap_b.sites}),
        "routing_flips": sum(flips) if pinned else None,
    }


@torch.no_grad()
def output_scale(lm, inputs) -> dict:
    """The size of what the checks compare: max |logits| and max |hidden state| of one eager pass. A max |Δ|
    means little without it — float32 resolves about 7 significant digits (ε ≈ 1.2e-7)."""
    out = lm.forward(inputs, backend="eager")
    return {"logits": None if out.logits is None else float(out.logits.abs().max()),
            "hidden": float(out.hidden.abs().max()), "eps": float(torch.finfo(torch.float32).eps)}


@torch.no_grad()
def pattern_recovery(lm, inputs, backend: str) -> list[dict]:
    """recovery_report of one eager and one `backend` capture of `inputs`."""
    def records(b):
        cap = lm.forward(inputs, backend=b).capture
        return {s: cap[s] for s in cap.sites}

    return recovery_report(records("eager"), records(backend))


def recovery_report(eager_records: dict, fused_records: dict, at_T: int = 4096) -> list[dict]:
    """Per site: bytes a fused capture keeps (q and k, float32), bytes of the full pattern it never stores,
    the same two for a self-attention input of `at_T` tokens (q, k grow as T, the pattern as T²), and the
    max |Δ| between the pattern recomputed from q and k and the eager pattern."""
    out = []
    for site, fr in fused_records.items():
        er = eager_records[site]
        B, H, Tq, d = fr.q.shape
        out.append({"site": site, "layer": fr.layer, "kind": fr.attn_type, "kernel": fr.kernel, "lazy": fr.lazy,
                    "kept_bytes": int(fr.q.nbytes + fr.k.nbytes), "pattern_bytes": int(B * H * Tq * fr.k_len * 4),
                    "kept_bytes_at": int(2 * B * H * at_T * d * 4), "pattern_bytes_at": int(B * H * at_T * at_T * 4),
                    "at_T": at_T, "max_abs_pattern": float(np.abs(fr.pattern() - er.pattern()).max())})
    return out


# -- this machine ------------------------------------------------------------------------------------------
def device_summary() -> dict:
    """What this machine can run: CUDA or not, and what flash means here."""
    cuda = torch.cuda.is_available()
    d = {"torch": torch.__version__, "cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else "CPU",
         "threads": torch.get_num_threads()}
    d["flash_here"] = ("FlashAttention-2 kernel (SDPBackend.FLASH_ATTENTION) in fp16/bf16 on the GPU" if cuda
                       else "PyTorch's fused CPU kernel (the flash algorithm, tiled with an online softmax, "
                            "in float32 on the CPU)")
    return d


def _eager_op(q, k, v, mask):
    s = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)  # [B, H, T, T] materialised
    return torch.matmul(masked_softmax_torch(s, mask, in_place=True), v)


def _fused_op(q, k, v, flash: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if flash:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _peak_bytes(fn, device: str = "cpu") -> int:
    """Peak bytes of tensors alive during fn() above the start: the CUDA allocator's peak on a GPU, the
    autograd profiler's allocation events on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        del out
        return int(torch.cuda.max_memory_allocated() - start)
    # the autograd profiler itself: torch.profiler's wrapper imports the compiler stack on first use (over 1 s)
    with torch.autograd.profiler.profile(profile_memory=True) as prof:
        out = fn()
        del out
    cur = peak = 0
    for e in sorted(prof.function_events, key=lambda e: (e.time_range.start, -e.time_range.end)):
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return int(peak)


@torch.no_grad()
def _seconds(fn, device: str) -> float:
    """Wall time of one fn() call: CUDA events around it on a GPU (the kernels run asynchronously)."""
    if device != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def time_attention(lengths, n_heads: int = 4, d_head: int = 32, repeats: int = 5, budget_s: float = 0.15,
                   backends=BACKENDS, memory: bool = True, seed: int = 0,
                   threads: int | None = 1, device: str = "cpu", dtype: torch.dtype = torch.float32) -> list[dict]:
    """Time one causal attention call [1, H, T, d] per backend and length, and its peak tensor memory.

    After a warm-up, calls repeat until `budget_s` has passed (at least `repeats` times, at most 200); the
    best time is reported (the least disturbed by other work on a shared machine) with the median beside
    it. `threads` pins PyTorch's intra-op threads for the measurement (1: steady numbers on a busy
    machine; None: leave as is). eager materialises the T×T matrix; the fused kernels do not. On `device`
    "cuda" the inputs are `dtype` (flash needs 16 bits there), times come from CUDA events and memory from the
    allocator's peak."""
    g = torch.Generator().manual_seed(seed)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    rows = []
    try:
        for T in lengths:
            q, k, v = (torch.randn(1, n_heads, T, d_head, generator=g).to(device, dtype) for _ in range(3))
            mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
            for b in backends:
                def fn(b=b, q=q, k=k, v=v, mask=mask):
                    return _eager_op(q, k, v, mask) if b == "eager" else _fused_op(q, k, v, b == "flash")

                _seconds(fn, device)  # warm-up
                times: list[float] = []
                start = time.perf_counter()
                while len(times) < repeats or (time.perf_counter() - start < budget_s and len(times) < 200):
                    times.append(_seconds(fn, device))
                rows.append({"T": int(T), "backend": b, "ms": 1e3 * min(times),
                             "median_ms": 1e3 * statistics.median(times), "runs": len(times),
                             "peak_bytes": _peak_bytes(fn, device) if memory else None, "device": device,
                             "matrix_bytes": int(n_heads * T * T * dtype.itemsize), "threads": torch.get_num_threads()})
    finally:
        torch.set_num_threads(old_threads)
    return rows
