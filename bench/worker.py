"""One benchmark job in its own process: `python -m analysis.bench.worker '<json spec>'`.

A job loads one model (ours or transformers' GPT-2) and either times forwards (several modes,
interleaved round by round so a busy machine slows them alike) or measures one mode's peak memory:
the resident set's high-water mark (Linux VmHWM, reset through /proc/self/clear_refs after the model
is loaded) while the mode runs once and its output is held. A watchdog thread ends the process if
its resident set passes the job's limit, so a mode that does not fit fails alone. The result is
printed as one line: RESULT_PREFIX + JSON.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

RESULT_PREFIX = "ATTNLAB_BENCH_RESULT "
OUR_MODES = ("fused", "eager_capture", "lazy_capture")
HF_MODES = ("hf_eager_attentions", "hf_sdpa")
OOM_EXIT = 75


# -- memory ---------------------------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class PeakMeter:
    """Peak resident memory since `reset()`: the kernel's VmHWM when it can be reset, else sampled."""

    def __init__(self, limit_bytes: int | None = None, period_s: float = 0.005):
        self.limit, self.period = limit_bytes, period_s
        self.sampled = 0
        self.method = "sampled RSS every 5 ms"
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            rss = rss_bytes()
            self.sampled = max(self.sampled, rss)
            if self.limit and rss > self.limit:
                sys.stderr.write(f"resident memory {rss / 2**30:.1f} GiB passed the job's limit "
                                 f"{self.limit / 2**30:.1f} GiB\n")
                os._exit(OOM_EXIT)
            time.sleep(self.period)

    def reset(self) -> int:
        gc.collect()
        now = rss_bytes()
        self.sampled = now
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
            self.method = "VmHWM (kernel high-water mark, reset after loading)"
        except OSError:
            pass
        return now

    def peak(self) -> int:
        hwm = _status_kb("VmHWM") if self.method.startswith("VmHWM") else None
        return max(hwm or 0, self.sampled)


# -- models ---------------------------------------------------------------------------------------------------
def hf_gpt2_config(spec: dict):
    from transformers import GPT2Config

    return GPT2Config(**spec["hf_config"])


def load_ours_gpt2(spec: dict):
    """Our model with the saved transformers GPT-2 weights, converted by model.hf.convert."""
    from safetensors.torch import load_file

    from model.checkpoint import load_weights
    from model.hf.convert import convert_gpt2, gpt2_config
    from model.transformer import build_model

    cfg = gpt2_config(dict(spec["hf_config"]))  # GPT2Config's defaults match gpt2_config's; no transformers import
    with torch.device("meta"):  # no random init: every weight is loaded below
        model = build_model(cfg)
    model = model.to_empty(device="cpu")
    if cfg.tie_embeddings:
        model.lm_head.weight = model.embed.tok.weight  # to_empty unties shared parameters
    hf_state = load_file(spec["weights"])
    load_weights(model, convert_gpt2(hf_state, cfg), spec["weights"])
    return model.eval(), cfg.vocab_size


def load_hf_gpt2(spec: dict):
    """transformers' GPT2LMHeadModel with the saved weights. Its attention function is read from
    config._attn_implementation at every call, so one model serves both hf_* modes."""
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel

    with torch.device("meta"):
        model = GPT2LMHeadModel(hf_gpt2_config(spec))
    model = model.to_empty(device="cpu")
    model.tie_weights()
    missing, unexpected = model.load_state_dict(load_file(spec["weights"]), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GPT-2 weights do not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval(), model.config.vocab_size


def load_registry(spec: dict):
    from model.registry import load

    lm = load(spec["name"])
    return lm.model.eval(), lm.cfg.vocab_size


def forward_fn(mode: str, ours, hf, ids):
    """A callable running one forward of `mode` and returning what the mode keeps."""
    from model import hooks

    if mode == "fused":
        return lambda: ours(ids, backend="sdpa").logits
    if mode in ("eager_capture", "lazy_capture"):
        backend = "eager" if mode == "eager_capture" else "sdpa"

        def run():
            with hooks.capture() as cap:
                out = ours(ids, backend=backend)
            return out.logits, cap

        return run
    if mode in HF_MODES:
        attn, want = ("eager", True) if mode == "hf_eager_attentions" else ("sdpa", False)

        def run_hf():
            hf.config._attn_implementation = attn
            out = hf(ids, use_cache=False, output_attentions=want)
            if want and (out.attentions is None or len(out.attentions) != hf.config.n_layer):
                raise RuntimeError("transformers returned no attentions")
            return out

        return run_hf
    raise ValueError(f"unknown mode {mode!r}")


def load_models(spec: dict, modes) -> tuple:
    """(ours, hf, vocab): our model for our modes, transformers' GPT-2 for the hf_* modes."""
    ours = hf = None
    vocab = None
    if any(m in OUR_MODES or m == "hooks" for m in modes):
        ours, vocab = load_registry(spec) if spec["source"] == "registry" else load_ours_gpt2(spec)
    if any(m in HF_MODES for m in modes):
        hf, vocab = load_hf_gpt2(spec)
    return ours, hf, vocab


def token_ids(T: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, T), generator=g)


def _timed(fn) -> float:
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    del out
    return dt


# -- jobs ----------------------------------------------------------------------------------------------------
def job_time(spec: dict) -> dict:
    """Median seconds per forward of each mode, interleaved round by round after `warmup` rounds."""
    modes = spec["modes"]
    ours, hf, vocab = load_models(spec, modes)
    ids = token_ids(spec["T"], vocab)
    fns = {m: forward_fn(m, ours, hf, ids) for m in modes}
    times = {m: [] for m in modes}
    with torch.no_grad():
        for r in range(spec["warmup"] + spec["repeats"]):
            gc.collect()
            for m in modes:
                dt = _timed(fns[m])
                if r >= spec["warmup"]:
                    times[m].append(dt)
    return {"times_s": times, "time_s": {m: statistics.median(t) for m, t in times.items()}}


def job_hooks(spec: dict) -> dict:
    """Our fused forward with capture off, against the same forward with `hooks.active` replaced by a
    plain `lambda: None` (no ContextVar at all): the cost of hook points that nothing uses. The ratio
    is the median of the per-pair ratios (off / patched)."""
    import timeit

    import model.hooks as hooks
    from model.attention import Attention

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
    result = {"baseline_rss_bytes": baseline, "peak_rss_bytes": peak, "peak_above_baseline_bytes": peak - baseline,
              "method": meter.method}
    try:
        if mode == "lazy_capture" and spec.get("extras"):
            result["extras"] = lazy_extras(out[1], spec, meter)
    finally:
        meter.stop()
    return result


def lazy_extras(cap, spec: dict, meter: PeakMeter) -> dict:
    """From a lazy capture: one head's full pattern (AttentionRecord.pattern, numpy), the same through
    model.longinput (torch, blocks), a pooled overview of one head, and one query's streamed rollout."""
    from analysis.longinput import overview, rollout_query
    from model.longinput import full_pattern

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
