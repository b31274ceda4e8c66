"""The faithfulness report of a model, computed once and kept on disk.

The report (analysis.faithfulness.benchmark.faithfulness) depends on the weights and the held-out examples, not on any
text a page shows; the Rollout page asks for it on every first visit. A report is kept as JSON under
`cache_dir()` (ATTNLAB_CACHE_DIR, else ~/.cache/attnlab) in faithfulness/, named by a SHA-256 over the model's
name and configuration, the weights' bytes, the scored cases (ids, query, answer, sources), the device and dtype, the
methods and the options: retrained weights, a changed configuration (an activation, a position scheme, a norm's eps:
choices without weights of their own) or a changed corpus give another name, never a stale report. A bundled model's
default report (SHIPPED) also ships beside its checkpoint (`attnlab faithfulness --ship`), read before the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch
from attnlab.analysis.faithfulness import benchmark as faithfulness_
from attnlab.analysis.faithfulness.cases import Case, make_cases
from attnlab.model.registry import BUNDLED_DIR

VERSION = 2  # bump when the report's meaning changes (2: integrated gradients by the adaptive rule, probes/ig_rule.py)
SHIPPED = {"n": 40, "seed": 0, "methods": faithfulness_.METHODS, "ablation": False}  # the Rollout page's default


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


def cases_hash(cases: list[Case]) -> str:
    """SHA-256 over what each case scores: its ids (source ids too), query, answer id and source positions."""
    h = hashlib.sha256()
    for c in cases:
        for t in (c.inputs.ids, c.inputs.src_ids):
            h.update(b"-" if t is None else np.asarray(t.cpu(), dtype=np.int64).tobytes())
        h.update(f"|{c.query}|{c.answer_id}|{c.sources}|".encode())
    return h.hexdigest()


def config_key(cfg) -> str:
    """The configuration's fields set away from their defaults (a field added later, at its default, keeps the
    key), or its repr when it is not a dataclass."""
    if not dataclasses.is_dataclass(cfg):
        return repr(cfg)
    return repr({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != f.default})


def report_key(lm, cases, methods, ablation: bool) -> str:
    """The file name (without .json) of the report of `lm` over `cases`."""
    parts = [str(VERSION), lm.name, config_key(lm.cfg), weights_hash(lm.model), cases_hash(cases), lm.device, str(lm.dtype),
             ",".join(faithfulness_.scored(lm, methods)), str(bool(ablation))]  # what is scored: a new method, a new key
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]


def report_path(lm, n: int = 40, seed: int = 0, *, methods=faithfulness_.METHODS, ablation: bool = False,
                folder: Path | None = None) -> Path:
    """Where the report of faithfulness(lm, n, seed, methods=…, ablation=…) is kept: beside a bundled checkpoint
    when it ships there, else in `folder` (default cache_dir()/faithfulness; it may not be there yet)."""
    *shipped, kept = _paths(lm, make_cases(lm, n, seed), methods, ablation, folder)
    return next((p for p in shipped if p.is_file()), kept)


def shipped_dir(lm) -> Path | None:
    """A bundled model's checkpoint folder, where its reports ship; None for any other model."""
    return BUNDLED_DIR / lm.name if lm.source == "bundled" else None


def _paths(lm, cases, methods, ablation: bool, folder: Path | None) -> list[Path]:
    """Where to look for the report, in order: beside a bundled checkpoint (folder None), then `folder`."""
    key = report_key(lm, cases, methods, ablation)
    ship = shipped_dir(lm) if folder is None else None
    return ([ship / f"faithfulness-{key}.json"] if ship else []) + [
        (folder or cache_dir() / "faithfulness") / f"{key}.json"]


def read_report(path: Path) -> dict | None:
    """The report kept at `path`; None when there is none (or a torn file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def kept_faithfulness(lm, n: int = 40, seed: int = 0, *, methods=faithfulness_.METHODS, ablation: bool = False,
                      folder: Path | None = None, on_step=None) -> dict:
    """faithfulness(lm, n, seed, methods=…, ablation=…), read back where report_path looks when this model's
    weights and cases were scored before, else computed and written to `folder` (default
    cache_dir()/faithfulness). `on_step(done, total)`: faithfulness's slices, when it computes."""
    cases = make_cases(lm, n, seed)
    *shipped, path = _paths(lm, cases, methods, ablation, folder)
    for p in (*shipped, path):
        report = read_report(p)
        if report is not None:
            return report
    report = faithfulness_.faithfulness(lm, n, seed, cases=cases, methods=methods, ablation=ablation, on_step=on_step)
    _write(path, report)
    return report


def ship(lm) -> Path:
    """Compute the SHIPPED report of a bundled model and write it beside its checkpoint (older ones removed)."""
    folder = shipped_dir(lm)
    if folder is None:
        raise ValueError(f"{lm.name} is not a bundled model: its reports are kept in {cache_dir()}")
    cases = make_cases(lm, SHIPPED["n"], SHIPPED["seed"])
    report = faithfulness_.faithfulness(lm, SHIPPED["n"], SHIPPED["seed"], cases=cases, methods=SHIPPED["methods"],
                                        ablation=SHIPPED["ablation"])
    path = _paths(lm, cases, SHIPPED["methods"], SHIPPED["ablation"], None)[0]
    for old in folder.glob("faithfulness-*.json"):
        old.unlink()
    _write(path, report)
    return path


def _write(path: Path, report: dict) -> None:
    """Write `report` to `path` atomically (a reader sees the whole report or none); a folder that cannot be
    written costs the keeping, never the report."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(report), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


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
