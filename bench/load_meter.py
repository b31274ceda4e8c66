"""Load time and memory of one model load, ours or transformers', each in a fresh process.

`measure(folder, who, dtype)` starts `python -m attnlab.bench.load_meter`, which imports torch, transformers and
attnlab (both sides pay the same imports), resets the peak (/proc/self/clear_refs), loads, reads every
weight once (a weight mapped from the file counts once its pages are read), runs one short forward, and prints
JSON: seconds (the load call), ready_seconds (the load and that read: the weights in memory, as the first forward
needs them; a mapped weight is read lazily, so `seconds` alone favours the side that copies less), held_bytes (VmRSS growth once every weight was read), peak_bytes (VmHWM growth over
the load and that read), forward_bytes (VmRSS growth after a FORWARD_TOKENS-token forward: weights plus the
forward's own buffers), weight_bytes (parameters × bytes in the dtype). Linux only (/proc). `measure_alternating`
takes ours and transformers' in turn, several rounds, and keeps the medians.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

WHO = ("attnlab", "transformers")
FORWARD_TOKENS = 16


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _load(folder: str, who: str, dtype: torch.dtype, device_map: str | None = None):
    """The model (a torch module) and its parameter count."""
    if who == "attnlab":
        from attnlab.model.registry import load

        model = load(folder, dtype=dtype, device_map=device_map).model
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map=device_map).eval()
    return model, sum(p.numel() for p in model.parameters())


def _warm_up(dtype: torch.dtype) -> None:
    """Both sides' code paths once on tiny models (the imports and one-time buffers a first build and forward
    take, ~70 MB, are not the model's)."""
    import transformers
    from attnlab.model.registry import load

    load("random-decoder", dtype=dtype).model(torch.arange(4)[None])
    conf = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2)
    transformers.LlamaForCausalLM(conf).to(dtype)(torch.arange(4)[None])


def worker(folder: str, who: str, dtype_name: str) -> dict:
    """Load, forward, measure (runs in the child process)."""
    dtype = getattr(torch, dtype_name)
    _warm_up(dtype)
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current RSS
        f.write("5")
    base = _status()
    t0 = time.perf_counter()
    model, n = _load(folder, who, dtype)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        for p in model.parameters():
            p.sum()  # every page of every weight read once; no temporary larger than a scalar
    ready = time.perf_counter() - t0
    after = _status()
    ids = torch.arange(FORWARD_TOKENS)[None] % 100 + 3  # [1, T]
    with torch.no_grad():
        model(ids)
    return {"who": who, "dtype": dtype_name, "seconds": seconds, "ready_seconds": ready, "peak_bytes": after["VmHWM"] - base["VmRSS"],
            "held_bytes": after["VmRSS"] - base["VmRSS"], "forward_bytes": _status()["VmRSS"] - base["VmRSS"],
            "weight_bytes": n * dtype.itemsize, "n_params": n}


def measure(folder: str, who: str, dtype: str = "bfloat16", timeout: float = 900) -> dict:
    """`worker` in a fresh Python process (one thread, as the CPU benchmarks run)."""
    if who not in WHO:
        raise ValueError(f"who must be one of {WHO}, not {who!r}")
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    res = subprocess.run([sys.executable, "-m", "attnlab.bench.load_meter", str(folder), who, dtype],
                         capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"load_meter {who} {folder}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(worker(*sys.argv[1:4])))


def read_through(folder: str, chunk: int = 64 * 2**20) -> int:
    """Every safetensors file of `folder` read once (into the page cache, so the first load measured does not pay
    the disk for both sides); the bytes read."""
    from pathlib import Path

    n = 0
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb", buffering=0) as f:
            while block := f.read(chunk):
                n += len(block)
    return n


def measure_alternating(folder: str, rounds: int = 3, dtype: str = "bfloat16") -> dict[str, dict]:
    """{who: the median of `rounds` measures (each number's median on its own; every run under "runs")}, ours and
    transformers' taken in turn, the order swapped each round (a shared machine's load falls on both alike), after
    one read of the files."""
    read_through(folder)
    runs: dict[str, list[dict]] = {who: [] for who in WHO}
    for r in range(rounds):
        for who in WHO if r % 2 == 0 else WHO[::-1]:
            runs[who].append(measure(folder, who, dtype))
    out = {}
    for who, rows in runs.items():
        med = dict(rows[0])
        for key, value in rows[0].items():
            if isinstance(value, (int, float)) and key != "n_params":
                vals = sorted(row[key] for row in rows)
                med[key] = vals[len(vals) // 2]
        out[who] = med | {"rounds": len(rows), "runs": [{k: row[k] for k in ("seconds", "ready_seconds", "peak_bytes",
                                                                            "held_bytes")} for row in rows]}
    return out
