"""One benchmark job in its own process: `python -m attnlab.bench.worker '<json spec>'`.

A job loads one model (ours or transformers' GPT-2, bench.forward) and either times forwards (several
modes, interleaved round by round so a busy machine slows them alike) or measures one mode's peak memory
(bench.meter): the resident set's high-water mark while the mode runs once and its output is held. A
mode that passes the job's memory limit ends the process alone. The result is printed as one line:
RESULT_PREFIX + JSON.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time

import numpy as np
import torch
from attnlab.analysis.machinery.bench_report import Result
from attnlab.bench.forward import forward_fn, load_models, token_ids
from attnlab.bench.meter import PeakMeter

RESULT_PREFIX = "ATTNLAB_BENCH_RESULT "


def _timed(fn, cpu: list | None = None) -> float:
    """Wall seconds of fn(); its process CPU seconds appended to `cpu` when given."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    if cpu is not None:
        cpu.append(time.process_time() - c)
    del out
    return dt


def job_time(spec: dict) -> dict:
    """Median seconds per forward of each mode, interleaved round by round after `warmup` rounds; also each
    forward's process CPU time (steadier than wall time when other jobs share the cores)."""
    modes = spec["modes"]
    ours, hf, vocab = load_models(spec, modes)
    ids = token_ids(spec["T"], vocab)
    fns = {m: forward_fn(m, ours, hf, ids) for m in modes}
    times, cpu = {m: [] for m in modes}, {m: [] for m in modes}
    with torch.no_grad():
        for r in range(spec["warmup"] + spec["repeats"]):
            gc.collect()
            for m in modes:
                spent = []
                dt = _timed(fns[m], spent)
                if r >= spec["warmup"]:
                    times[m].append(dt)
                    cpu[m] += spent
    return {"times_s": times, "time_s": {m: statistics.median(t) for m, t in times.items()}, "cpu_times_s": cpu}


def job_hooks(spec: dict) -> dict:
    """Our fused forward with capture off, against the same forward with `hooks.active` replaced by a
    plain `lambda: None` (no ContextVar at all): the cost of hook points that nothing uses. The ratio
    is the median of the per-pair ratios (off / patched)."""
    import timeit

    import attnlab.model.hooks as hooks
    from attnlab.model.attention import Attention

    ours, _, vocab = load_models(spec, ["hooks"])
    ids = token_ids(spec["T"], vocab)
    original = hooks.active

    def plain():
        hooks.active = lambda: None
        try:
            return _timed(lambda: ours(ids, backend="sdpa"))
        finally:
            hooks.active = original

    off, patched = [], []
    with torch.no_grad():
        for r in range(spec["warmup"] + spec["repeats"]):
            if r % 2:  # alternate the order (ABBA) so a drifting machine favours neither
                b, a = plain(), _timed(lambda: ours(ids, backend="sdpa"))
            else:
                a, b = _timed(lambda: ours(ids, backend="sdpa")), plain()
            if r >= spec["warmup"]:
                off.append(a)
                patched.append(b)
    sites = sum(isinstance(m, Attention) for m in ours.modules())  # one hooks.active() call per site
    n = 200_000
    call_s = min(timeit.repeat(hooks.active, number=n, repeat=5)) / n
    plain_s = min(timeit.repeat(lambda: None, number=n, repeat=5)) / n
    return {"off_s": statistics.median(off), "patched_s": statistics.median(patched),
            "off_times_s": off, "patched_times_s": patched,
            "ratio": statistics.median(a / b for a, b in zip(off, patched)),
            "ratio_of_medians": statistics.median(off) / statistics.median(patched),
            "sites": sites, "active_call_ns": call_s * 1e9, "lambda_call_ns": plain_s * 1e9,
            "implied_ratio": 1 + sites * max(call_s - plain_s, 0.0) / statistics.median(patched)}


def job_memory(spec: dict) -> dict:
    """Peak resident memory of one mode: one forward after the model is loaded, its output held."""
    mode = spec["mode"]
    meter = PeakMeter(spec.get("limit_bytes"))
    ours, hf, vocab = load_models(spec, [mode])
    ids = token_ids(spec["T"], vocab)
    fn = forward_fn(mode, ours, hf, ids)
    baseline = meter.reset()
    with torch.no_grad():
        out = fn()  # held while the peak is read, as a caller would hold it
    peak = meter.peak()
    result = {Result.BASELINE: baseline, Result.PEAK_RSS: peak, Result.PEAK: peak - baseline,
              Result.METHOD: meter.method}
    try:
        if mode == "lazy_capture" and spec.get("extras"):
            result["extras"] = lazy_extras(out[1], spec, meter)
    finally:
        meter.stop()
    return result


def lazy_extras(cap, spec: dict, meter: PeakMeter) -> dict:
    """From a lazy capture: one head's full pattern (AttentionRecord.pattern, numpy), the same through
    model.longinput (torch, blocks), a pooled overview of one head, and one query's streamed rollout."""
    from attnlab.analysis.attention.long_records import overview, rollout_query
    from attnlab.model.longinput import full_pattern

    records = [cap[s] for s in cap.sites]
    rec = records[len(records) // 2]
    head = rec.n_heads // 2
    T = rec.q_len
    cells = spec.get("max_cells", 512)
    tasks = {
        "head_pattern_s": lambda: rec.pattern(head=head),
        "head_pattern_blocks_s": lambda: full_pattern(rec, head),
        "overview_s": lambda: overview(rec, head, cells, "max"),
        "rollout_s": lambda: rollout_query(records, T - 1),
    }
    out = {"layer": rec.layer, "head": head, "query": T - 1, "max_cells": cells, "lazy_bytes":
           int(sum(r.q.nbytes + r.k.nbytes for r in records)), "lazy_resident_bytes": _resident_lazy(records)}
    for name, fn in tasks.items():
        base = meter.reset()
        times = [_timed(fn) for _ in range(spec["warmup"] + spec["repeats"])][spec["warmup"]:]
        out[name] = statistics.median(times)
        out[name.replace("_s", "_times_s")] = times
        out[name.replace("_s", "_peak_above_bytes")] = meter.peak() - base
    return out


def _resident_lazy(records) -> int:
    """Bytes the records keep alive: the buffers under their arrays (q and k may be views of a larger
    tensor, such as the fused qkv projection, which then stays alive whole)."""
    seen, total = set(), 0
    for r in records:
        for a in (r.q, r.k, r.mask, r.bias):
            if a is None:
                continue
            base = a
            while isinstance(base, np.ndarray) and base.base is not None:
                base = base.base
            if isinstance(base, torch.Tensor):  # a numpy view of a torch tensor
                key, nbytes = base.untyped_storage().data_ptr(), base.untyped_storage().nbytes()
            else:
                key, nbytes = id(base), getattr(base, "nbytes", a.nbytes)
            if key not in seen:
                seen.add(key)
                total += int(nbytes)
    return total


JOBS = {"time": job_time, "hooks": job_hooks, "memory": job_memory}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    result = JOBS[spec["job"]](spec)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
