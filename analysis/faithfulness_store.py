"""The faithfulness report of a model, computed once and kept on disk.

The report (analysis.faithfulness.faithfulness) depends on the weights and the held-out examples, not on any
text a page shows; the Rollout page asks for it on every first visit. A report is kept as JSON under
`cache_dir()` (ATTNLAB_CACHE_DIR, else ~/.cache/attnlab) in faithfulness/, named by a SHA-256 over the
weights' bytes, the scored cases (ids, query, answer, sources), the device and dtype, the methods and the
options: retrained weights or a changed corpus give another name, never a stale report.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from analysis import faithfulness as faithfulness_

VERSION = 1  # bump when the report's meaning changes


def cache_dir() -> Path:
    """Where attnlab keeps computed results: ATTNLAB_CACHE_DIR, else ~/.cache/attnlab."""
    return Path(os.environ.get("ATTNLAB_CACHE_DIR") or Path.home() / ".cache" / "attnlab")


def weights_hash(module: torch.nn.Module) -> str:
    """SHA-256 over every parameter's and buffer's name, dtype, shape and bytes (the checkpoint's content)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # [numel * itemsize] raw bytes
    return h.hexdigest()


def cases_hash(cases: list[faithfulness_.Case]) -> str:
    """SHA-256 over what each case scores: its ids (source ids too), query, answer id and source positions."""
    h = hashlib.sha256()
    for c in cases:
        for t in (c.inputs.ids, c.inputs.src_ids):
            h.update(b"-" if t is None else np.asarray(t.cpu(), dtype=np.int64).tobytes())
        h.update(f"|{c.query}|{c.answer_id}|{c.sources}|".encode())
    return h.hexdigest()


def report_key(lm, cases, methods, ablation: bool) -> str:
    """The file name (without .json) of the report of `lm` over `cases`."""
    parts = [str(VERSION), weights_hash(lm.model), cases_hash(cases), lm.device, str(lm.dtype), ",".join(methods),
             str(bool(ablation))]
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]


def report_path(lm, n: int = 40, seed: int = 0, *, methods=faithfulness_.METHODS, ablation: bool = False,
                folder: Path | None = None) -> Path:
    """Where the report of faithfulness(lm, n, seed, methods=…, ablation=…) is kept (it may not be there yet)."""
    return _path(lm, faithfulness_.make_cases(lm, n, seed), methods, ablation, folder)


def _path(lm, cases, methods, ablation: bool, folder: Path | None) -> Path:
    return (folder or cache_dir() / "faithfulness") / f"{report_key(lm, cases, methods, ablation)}.json"


def read_report(path: Path) -> dict | None:
    """The report kept at `path`; None when there is none (or a torn file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def kept_faithfulness(lm, n: int = 40, seed: int = 0, *, methods=faithfulness_.METHODS, ablation: bool = False,
                      folder: Path | None = None) -> dict:
    """faithfulness(lm, n, seed, methods=…, ablation=…), read from `folder` (default cache_dir()/faithfulness)
    when this model's weights and cases were scored before, else computed and written there. A folder that
    cannot be written costs the keeping, never the report."""
    cases = faithfulness_.make_cases(lm, n, seed)
    path = _path(lm, cases, methods, ablation, folder)
    report = read_report(path)
    if report is not None:
        return report
    report = faithfulness_.faithfulness(lm, n, seed, cases=cases, methods=methods, ablation=ablation)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(report), encoding="utf-8")
        tmp.replace(path)  # atomic: a reader sees the whole report or none
    except OSError:
        pass
    return report


def joined(first: dict, second: dict | None) -> dict:
    """One report of the methods of two reports over the same cases (`second`'s methods added in METHODS order,
    its integrated-gradients details too); `first` as it is when `second` is None."""
    if second is None:
        return first
    if (first["n_examples"], first["seed"], first["model"]) != (second["n_examples"], second["seed"],
                                                                second["model"]):
        raise ValueError("the two reports score different examples")
    both = {**first["methods"], **second["methods"]}
    tasks = {t: {**first["by_task"].get(t, {}), **second["by_task"].get(t, {})}
             for t in {**first["by_task"], **second["by_task"]}}
    order = [m for m in faithfulness_.METHODS if m in both]
    return {**first, "methods": {m: both[m] for m in order},
            "by_task": {t: {m: v[m] for m in faithfulness_.METHODS if m in v} for t, v in sorted(tasks.items())},
            **{k: second[k] for k in ("integrated_gradients",) if k in second}}
