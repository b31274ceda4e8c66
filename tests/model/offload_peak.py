"""Run once in a fresh process and print JSON: a bf16 checkpoint loaded in float32 under a device map that keeps
`cpu_bytes` in memory and offloads the rest to disk, and what that cost: peak = VmHWM growth over the load (its
high-water mark reset after the imports, /proc/self/clear_refs), kept = bytes of the parameters held in memory,
largest = the largest parameter's float32 bytes, total = every parameter's float32 bytes. Used by
test_offload_dtype.py: python -m tests.model.offload_peak FOLDER OFFLOAD_FOLDER CPU_BYTES."""

from __future__ import annotations

import json
import sys

import torch


def status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def main(folder: str, offload: str, cpu_bytes: int) -> dict:
    import accelerate.utils  # noqa: F401  (the imports a device map needs, before the peak is reset)
    from attnlab.model.registry import load

    load("random-decoder")  # the loader's own one-time costs
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS")
    lm = load(folder, dtype=torch.float32, device_map="auto", max_memory={"cpu": cpu_bytes}, offload_folder=offload)
    peak = status("VmHWM") - base
    params = list(lm.model.parameters())
    return {"peak": peak, "kept": sum(p.numel() * 4 for p in params if p.device.type != "meta"),
            "largest": max(p.numel() * 4 for p in params), "total": sum(p.numel() * 4 for p in params),
            "on_disk": sum(d == "disk" for d in lm.model.hf_device_map.values())}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
