"""The Mechanics pages' cached entry points (KV cache, Backends, Positions, the flash stepper, the tour's running
steps): the checks of `attnlab check` one at a time and what the pages draw beside them, each under the inference
lock through app.state's on_text / on_model."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
import torch
from attnlab.analysis.machinery import backends, checks, kv_cache, positions
from attnlab.analysis.machinery import flash_tiling as flash_tiling_
from attnlab.analysis.machinery.bench_report import DEFAULT_PATH, read_benchmarks
from attnlab.analysis.probes import generation
from attnlab.analysis.probes import head_vectors as head_vectors_
from attnlab.app.state import inference, on_model, on_text

from attnlab.data import data_folder

BENCH_FILE = data_folder("docs") / Path(DEFAULT_PATH).name  # the latest `attnlab bench` JSON

# -- the checks of `attnlab check`, one at a time, and what the pages draw beside them -------
kv_cache_check = on_text(checks.check_kv_cache, spinner="Running the cache checks of `attnlab check`…")
greedy_cache_check = on_text(checks.check_greedy_cache, spinner="Generating with and without the cache…")
backend_check = on_text(checks.check_backend, spinner="Comparing the backends as `attnlab check` does…")
_cache_generation = on_text(checks.generation_steps, spinner="Generating with and without the cache…")


def cache_generation(name: str, text: str, src: str | None, n_new: int, backend: str) -> dict:
    """The KV-cache page's generation (analysis.machinery.checks.generation_steps): the first steps of the greedy check's
    own generation when it ran the same backend that far (one generation on a first visit, not two)."""
    if backend == checks.CACHE_BACKEND and 1 <= n_new <= checks.GREEDY_TOKENS:
        return checks.first_steps(greedy_cache_check(name, text, src).detail, n_new)
    return _cache_generation(name, text, src, n_new, backend)


cache_generation.clear = _cache_generation.clear
output_scale = on_text(backends.output_scale)
pattern_recovery = on_text(backends.pattern_recovery)  # (name, text, src, backend)
prefix_stability = on_text(kv_cache.prefix_stability, spinner="Running every prefix of the text…")
generation_trace = on_text(generation.generation_trace, entries=32, spinner="Generating…")
position_table = on_model(positions.position_table, entries=8, spinner="Reading the position embeddings…")
# (name, text, src, site, head, block_q, block_k) -> (analysis.machinery.flash_tiling.Tiling, the model's own output of the head)
flash_tiling = on_text(flash_tiling_.head_tiling, entries=16)
# (name, text, src, site, head, query) -> one query row as vectors (analysis.probes.head_vectors.HeadVectors)
head_vectors = on_text(head_vectors_.head_vectors, entries=16)


@st.cache_data(max_entries=8, show_spinner="Timing the kernels on this machine…")
def attention_timings(lengths: tuple[int, ...], n_heads: int, d_head: int, repeats: int = 7,
                      device: str = "cpu", dtype: str = "float32") -> list[dict]:
    """attnlab.analysis.machinery.backends.time_attention on `device` in `dtype`, `repeats` calls per cell, under the lock (no other
    request runs meanwhile)."""
    with inference():
        return backends.time_attention(lengths, n_heads=n_heads, d_head=d_head, repeats=repeats, budget_s=0.0,
                                       device=device, dtype=getattr(torch, dtype))


@st.cache_data(ttl=300, show_spinner=False)
def benchmark_results() -> dict | None:
    """The latest `attnlab bench` JSON (docs/benchmarks.json), or None; plus docs/benchmarks.md's text. Its
    "path" is the file's place in the repository, never the server's folders (a page shows it to students)."""
    out = read_benchmarks(BENCH_FILE)
    if out is not None:
        out["path"] = DEFAULT_PATH
    md = BENCH_FILE.with_suffix(".md")
    if md.is_file():
        out = (out or {"path": None, "machine": None, "rows": []}) | {"markdown": md.read_text(encoding="utf-8")}
    return out
