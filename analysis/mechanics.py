"""How attention is computed, as numbers the app's mechanics pages show: generation traced step by step,
the KV cache checked against full recomputation, eager vs fused kernels timed, patterns recovered from a
fused run, multi-head splits, and the position schemes (sinusoidal, learned, RoPE, ALiBi).

Everything returned is numpy or plain Python (picklable, cacheable); torch stays inside.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from analysis.consistency import TOL_CACHE, captured, chunks, scaled_tolerance, stitch
from analysis.stepwise import Steps, attention_steps
from model import hooks
from model.cache import KVCache
from model.positions import alibi_bias, alibi_slopes, apply_rope, rope_angles, sinusoidal_table
from model.softmax import masked_softmax, masked_softmax_torch

TOP_K = 5


# -- generation, traced ------------------------------------------------------------------------------------
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


def _sampling_probs(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """The distribution the next token is drawn from (greedy: the plain softmax): [V]."""
    x = logits.float()
    if temperature > 0:
        x = x / temperature
        if top_k is not None and top_k < x.shape[-1]:
            kth = torch.topk(x, top_k).values[-1]
            x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


@torch.no_grad()
def generation_trace(lm, inputs, n_new: int, *, temperature: float = 0.0, top_k: int | None = None,
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
        raise ValueError(f"the prompt already fills the model's context ({lm.cfg.max_len} tokens); shorten it")
    final = T0 + n_steps - 1  # keys seen by the last step
    sites = [s for s in cap.sites if len(cap.steps(s)) >= n_steps]  # the encoder ran once: not a step
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
        p = _sampling_probs(lg[0], temperature, top_k)
        pv, pi = p.topk(min(TOP_K, p.shape[-1]))
        tops.append([lm.label(i) for i in pi.tolist()])
        top_p[s, : len(pv)] = pv.numpy()
        chosen[s] = float(p[ids[T0 + s]])
    labels = list(inputs.tokens) + [lm.label(i) for i in ids[T0:]]
    return GenTrace(labels, ids, T0, inputs.src_tokens, sites, kinds, layers, rows, tops, top_p, chosen,
                    sorted(kernels), temperature, top_k, seed, eos is not None and ids[-1] == eos)


# -- the KV cache ------------------------------------------------------------------------------------------
@torch.no_grad()
def cache_generation(lm, inputs, n_new: int, backend: str = "sdpa") -> dict:
    """Greedy generation with and without the cache, step by step: max |Δlogits| of each step's
    next-token logits, the token each picked, and the verdict (all within TOL_CACHE, same tokens)."""
    if not lm.has_cache:
        raise ValueError("an encoder has no KV cache; pick a decoder or an encoder–decoder")
    la, lb = [], []
    a = lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=True, step_logits=la,
                   stop_at_eos=False)[0]
    b = lm.generate("", n_new, inputs=inputs, backend=backend, use_cache=False, step_logits=lb,
                   stop_at_eos=False)[0]
    T0 = inputs.ids.shape[1]
    if not la:
        raise ValueError(f"the prompt already fills the model's context ({lm.cfg.max_len} tokens); shorten it")
    steps = []
    tol = max(scaled_tolerance(TOL_CACHE, y) for y in lb)
    for s, (x, y) in enumerate(zip(la, lb)):
        d = float((x - y).abs().max())
        ta, tb = a[T0 + s], b[T0 + s]
        steps.append({"step": s, "position": T0 + s, "max_abs_logits": d, "cached_token": lm.label(ta),
                      "uncached_token": lm.label(tb), "same_token": ta == tb, "passed": d <= tol and ta == tb})
    return {"backend": backend, "tolerance": tol, "steps": steps,
            "max_abs_logits": max((s["max_abs_logits"] for s in steps), default=0.0),
            "passed": all(s["passed"] for s in steps) and len(a) == len(b),
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
def cache_stitched(lm, inputs, backend: str = "sdpa") -> dict:
    """The prompt run in cached chunks (as `attnlab check` does): per site the rows stitched from the
    cached steps [H, T, T], the full uncached matrix [H, T, T], and the step boundaries."""
    if not lm.has_cache:
        raise ValueError("an encoder has no KV cache; pick a decoder or an encoder–decoder")
    _, full_rec = captured(lm, inputs, backend)
    T = inputs.ids.shape[1]
    cache, bounds, step_records = KVCache(), chunks(T), {}
    for a, b in bounds:
        cap = lm.forward(inputs.span(a, b), backend=backend, cache=cache).capture
        for site in cap.sites:
            step_records.setdefault(site, []).append(cap[site])
    out = {}
    for site, recs in step_records.items():
        if sum(r.q_len for r in recs) != T or recs[0].stack == "encoder":  # the encoder ran once over the source
            continue
        out[site] = {"stitched": stitch(recs, T), "full": full_rec[site].pattern(), "kind": recs[0].attn_type,
                     "layer": recs[0].layer, "kernels": sorted({r.kernel for r in recs})}
    return {"bounds": bounds, "sites": out, "backend": backend}


@torch.no_grad()
def prefix_stability(lm, inputs, backend: str = "eager", max_len: int = 64) -> dict:
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
            k = max(k, float((cap.tensor(f"{s}.hook_k") - full.tensor(f"{s}.hook_k")[:, :, :t]).abs().max()))
            v = max(v, float((cap.tensor(f"{s}.hook_v") - full.tensor(f"{s}.hook_v")[:, :, :t]).abs().max()))
        lengths.append(t)
        d_rows.append(r)
        d_k.append(k)
        d_v.append(v)
    return {"lengths": np.array(lengths), "rows": np.array(d_rows), "keys": np.array(d_k),
            "values": np.array(d_v), "truncated": inputs.ids.shape[1] > T, "T": T}


# -- backends ----------------------------------------------------------------------------------------------
@torch.no_grad()
def output_scale(lm, inputs) -> dict:
    """The size of what the checks compare: max |logits| and max |hidden state| of one eager pass. A max |Δ|
    means little without it — float32 resolves about 7 significant digits (ε ≈ 1.2e-7)."""
    out, _ = captured(lm, inputs, "eager")
    return {"logits": None if out.logits is None else float(out.logits.abs().max()),
            "hidden": float(out.hidden.abs().max()), "eps": float(torch.finfo(torch.float32).eps)}


def device_summary() -> dict:
    """What this machine can run: CUDA or not, and what flash means here."""
    cuda = torch.cuda.is_available()
    d = {"torch": torch.__version__, "cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else "CPU",
         "threads": torch.get_num_threads()}
    d["flash_here"] = ("FlashAttention-2 kernel (SDPBackend.FLASH_ATTENTION) in fp16/bf16 on the GPU" if cuda
                       else "PyTorch's fused CPU kernel (the flash algorithm, tiled with an online softmax, "
                            "in float32 on the CPU)")
    return d


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


def _eager_op(q, k, v, mask):
    s = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)  # [B, H, T, T] materialised
    return torch.matmul(masked_softmax_torch(s, mask, in_place=True), v)


def _fused_op(q, k, v, flash: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if flash:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _peak_bytes(fn) -> int:
    """Peak bytes of tensors alive during fn() above the start (PyTorch profiler's allocation events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out
    cur = peak = 0
    for e in sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end)):
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return int(peak)


@torch.no_grad()
def time_attention(lengths, n_heads: int = 4, d_head: int = 32, repeats: int = 5, budget_s: float = 0.15,
                   backends=("eager", "sdpa", "flash"), memory: bool = True, seed: int = 0,
                   threads: int | None = 1) -> list[dict]:
    """Time one causal attention call [1, H, T, d] per backend and length, and its peak tensor memory.

    After a warm-up, calls repeat until `budget_s` has passed (at least `repeats` times, at most 200); the
    best time is reported (the least disturbed by other work on a shared machine) with the median beside
    it. `threads` pins PyTorch's intra-op threads for the measurement (1: steady numbers on a busy
    machine; None: leave as is). eager materialises the T×T matrix; the fused kernels do not."""
    g = torch.Generator().manual_seed(seed)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    rows = []
    try:
        for T in lengths:
            q, k, v = (torch.randn(1, n_heads, T, d_head, generator=g) for _ in range(3))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            for b in backends:
                def fn(b=b, q=q, k=k, v=v, mask=mask):
                    return _eager_op(q, k, v, mask) if b == "eager" else _fused_op(q, k, v, b == "flash")

                fn()  # warm-up
                times: list[float] = []
                start = time.perf_counter()
                while len(times) < repeats or (time.perf_counter() - start < budget_s and len(times) < 200):
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                rows.append({"T": int(T), "backend": b, "ms": 1e3 * min(times),
                             "median_ms": 1e3 * statistics.median(times), "runs": len(times),
                             "peak_bytes": _peak_bytes(fn) if memory else None,
                             "matrix_bytes": int(n_heads * T * T * 4), "threads": torch.get_num_threads()})
    finally:
        torch.set_num_threads(old_threads)
    return rows


def read_benchmarks(paths) -> dict | None:
    """The newest `attnlab bench` JSON among `paths`, as {"path", "machine", "rows"} with rows of
    {T, mode, median_s, peak_mb, model}; None when no file exists. Unknown layouts keep rows empty."""
    for p in map(Path, paths):
        if not p.is_file():
            continue
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"path": str(p), "machine": None, "rows": [], "error": "not valid JSON"}
        return {"path": str(p), "machine": data.get("machine") if isinstance(data, dict) else None,
                "rows": _bench_rows(data)}
    return None


_T_KEYS = ("T", "seq_len", "tokens", "length", "n_tokens")
_MODE_KEYS = ("mode", "name", "backend")
_TIME_KEYS = ("median_s", "time_s", "seconds", "median", "median_ms", "time_ms")
_CONTAINERS = ("results", "rows", "runs", "data", "modes", "models", "benchmarks", "table")
_MEM_KEYS = ("peak_above_baseline_bytes", "peak_mb", "peak_mib", "peak_memory_mb", "peak_bytes", "peak_rss_bytes",
             "peak_rss_mb", "peak_gb")


def _first(d: dict, keys):
    for k in keys:
        if k in d and isinstance(d[k], (int, float)) and not isinstance(d[k], bool):
            return k, float(d[k])
    return None, None


def _bench_rows(data, ctx: dict | None = None) -> list[dict]:
    """`attnlab bench` JSON ({"results": [{model, T, mode, time_s, peak_above_baseline_bytes, …}]}), or any
    nesting of dicts/lists: keep the dicts that name a length, a mode and a time."""
    if ctx is None and isinstance(data, dict) and isinstance(data.get("results"), list):
        return _bench_rows(data["results"], {})
    ctx = dict(ctx or {})
    out = []
    if isinstance(data, list):
        for x in data:
            out += _bench_rows(x, ctx)
    elif isinstance(data, dict):
        if isinstance(data.get("model"), str):
            ctx["model"] = data["model"]
        _, T = _first(data, _T_KEYS)
        mode = next((data[k] for k in _MODE_KEYS if isinstance(data.get(k), str)), ctx.get("mode"))
        tk, t = _first(data, _TIME_KEYS)
        mk, m = _first(data, _MEM_KEYS)
        if T is not None and mode and t is not None:
            secs = t / 1e3 if tk.endswith("ms") else t
            mb = None if m is None else m / 2**20 if mk.endswith("bytes") else m * 1024 if mk == "peak_gb" else m
            model = ctx.get("model", "")
            out.append({"model": model, "mode": mode, "T": int(T), "median_s": secs, "peak_mb": mb,
                        "series": f"{model} · {mode}" if model else mode})
        for k, v in data.items():
            if isinstance(v, (dict, list)) and k != "machine":
                out += _bench_rows(v, ctx if k in _CONTAINERS else {**ctx, "mode": ctx.get("mode") or k})
    return out


# -- step by step ------------------------------------------------------------------------------------------
def multi_head_steps(q, k, v, n_heads: int, mask=None) -> tuple[list[Steps], np.ndarray]:
    """Split q, k, v [T, d_model] into n_heads column blocks of d_model/n_heads (each head its own
    d_head and its own 1/√d_head), attend per head, and concatenate the outputs: [T, d_model].
    (A real layer multiplies the concatenation by an output projection W_O; here W_O = I.)"""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    d = q.shape[-1]
    if d % n_heads:
        raise ValueError(f"d_model={d} is not divisible by {n_heads} heads")
    dh = d // n_heads
    steps = [attention_steps(q[:, h * dh:(h + 1) * dh], k[:, h * dh:(h + 1) * dh], v[:, h * dh:(h + 1) * dh],
                             mask=mask) for h in range(n_heads)]
    return steps, np.concatenate([s.output for s in steps], axis=-1)


def explain_weight(steps: Steps, i: int, j: int) -> dict:
    """The numbers behind one weight α_ij (0-based): the visible scores of row i, their exponentials
    (shifted by the row max for stability) and the share of key j."""
    row = steps.masked[i]
    vis = np.isfinite(row)
    ex = np.where(vis, np.exp(row - np.max(row[vis])) if vis.any() else 0.0, 0.0)
    total = float(ex.sum())
    return {"row": i, "col": j, "visible": vis, "scores": steps.scaled[i], "exp": ex, "total": total,
            "weight": float(steps.weights[i, j]), "masked": not bool(vis[j])}


# -- positions ---------------------------------------------------------------------------------------------
def sinusoidal(n_pos: int, d_model: int) -> np.ndarray:
    """The fixed sinusoidal table [n_pos, d_model] (Vaswani et al. 2017)."""
    return sinusoidal_table(n_pos, d_model).numpy()


def similarity(table) -> np.ndarray:
    """Cosine similarity between every pair of position vectors: [P, P]."""
    t = np.asarray(table, dtype=np.float64)
    n = np.linalg.norm(t, axis=-1, keepdims=True)
    u = t / np.where(n > 0, n, 1)
    return (u @ u.T).astype(np.float32)


def position_table(lm) -> tuple[str, np.ndarray | None]:
    """The model's own absolute position vectors: ("learned", weights [max_len, D]), ("sinusoidal",
    its table), or (scheme, None) for RoPE, ALiBi and none (nothing is added to the embeddings)."""
    m = lm.model
    stack = m.decoder if hasattr(m, "decoder") and hasattr(m, "encoder") else m
    emb = stack.embed
    if lm.cfg.positional == "learned":
        return "learned", emb.pos.weight.detach().float().numpy().copy()
    if lm.cfg.positional == "sinusoidal":
        return "sinusoidal", emb.sin_table.detach().float().numpy().copy()
    return lm.cfg.positional, None


def rope_demo(d_head: int = 16, n_pos: int = 24, base: float = 10000.0, seed: int = 0) -> dict:
    """RoPE's relative-offset property, numerically: one fixed query vector q and key vector k, rotated
    to every position m and n; the score matrix S[m, n] = rot(q, m)·rot(k, n) is constant along each
    diagonal (it depends on n − m only). For contrast, absolute sinusoidal positions added to q and k
    give A[m, n] = (q + p_m)·(k + p_n), which changes along a diagonal.

    Returns S, A [P, P], per offset o = m − n ≥ 0 the spread (max − min) along that diagonal, and
    `diagonals` [offsets, m]: S[m + o, m] for the first few m (every row of it is one repeated number)."""
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head size, got {d_head}")
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d_head, generator=g), torch.randn(d_head, generator=g)
    pos = torch.arange(n_pos)
    cos, sin = rope_angles(pos, d_head, base)  # [P, d]
    rq = apply_rope(q.expand(1, 1, n_pos, d_head), cos, sin)[0, 0]  # [P, d]
    rk = apply_rope(k.expand(1, 1, n_pos, d_head), cos, sin)[0, 0]
    S = (rq @ rk.T).double().numpy()
    pe = sinusoidal_table(n_pos, d_head)
    A = ((q + pe) @ (k + pe).T).double().numpy()
    offsets = np.arange(max(1, n_pos - 1))  # a diagonal needs two cells to have a spread
    spread_rope = np.array([np.ptp(np.diagonal(S, -o)) for o in offsets])
    spread_abs = np.array([np.ptp(np.diagonal(A, -o)) for o in offsets])
    n_m = min(8, n_pos)
    diag = np.full((min(6, n_pos), n_m), np.nan)
    for o in range(diag.shape[0]):
        d = np.diagonal(S, -o)[:n_m]
        diag[o, : len(d)] = d
    angles = (pos.float()[:, None] * base ** (-torch.arange(0, d_head, 2).float() / d_head)[None]).numpy()
    return {"S": S.astype(np.float32), "A": A.astype(np.float32), "offsets": offsets, "spread_rope": spread_rope,
            "spread_abs": spread_abs, "angles": angles.astype(np.float32),
            "cos_angles": np.cos(angles).astype(np.float32), "d_head": d_head, "base": base,
            "diagonals": diag}


def alibi(n_heads: int, T: int) -> dict:
    """ALiBi (Press et al. 2022): slopes m_h and the causal bias −m_h·(i − j) per head: [H, T, T]."""
    slopes = alibi_slopes(n_heads)
    pos = torch.arange(T)
    bias = alibi_bias(slopes, pos, pos).numpy()
    mask = np.tril(np.ones((T, T), dtype=bool))
    last = masked_softmax(bias[:, -1, :], mask[-1])  # [H, T]: weights of the last query with equal raw scores
    return {"slopes": slopes.numpy(), "bias": bias.astype(np.float32), "mask": mask, "last_weights": last,
            "half_life": np.array([math.log(2) / s for s in slopes.tolist()])}
