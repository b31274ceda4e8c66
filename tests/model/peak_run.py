"""Run once in a fresh process and print JSON: the estimate of model.budget and the measured peak resident memory
(VmHWM) the run added, its high-water mark reset after loading (/proc/self/clear_refs). Used by test_budget.py:
python -m tests.model.peak_run MODEL TOKENS BACKEND READS."""

from __future__ import annotations

import json
import sys

import torch


def hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def main(name: str, n: int, backend: str, reads: str) -> dict:
    from attnlab.analysis.probes.relevance import gradient_relevance
    from attnlab.model.budget import need_bytes, rss_bytes
    from attnlab.model.inputs import Inputs

    import attnlab as al

    lm = al.load(name)
    inp = Inputs(torch.randint(100, 1000, (1, n)), [str(i) for i in range(n)])  # [1, T]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak starts again from what the loaded model holds
    base = rss_bytes()
    if reads == "grad":
        gradient_relevance(lm, inp, n - 1)
    else:
        run = lm.capture(inp, backend)  # what a page keeps (lazy above MAX_STORED_CELLS)
        if reads == "patterns":
            run.matrices(run.text_group)  # [L, H, T, T]: what a page reads
    return {"model": name, "tokens": n, "backend": backend, "reads": reads,
            "need": need_bytes(lm.cfg, n, lm.dtype, backend, reads), "measured": hwm() - base}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])))
