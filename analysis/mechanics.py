"""The reader of `attnlab bench` JSON for the Backends page (app.state.benchmark_results): all that is left
here of the old mechanics module, whose numbers now live by question in analysis.kv_cache, .backends,
.positions, .generation, .stepwise and .checks. It goes when analysis.benchmarks.read_benchmarks arrives.
"""

from __future__ import annotations

import json
from pathlib import Path


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
