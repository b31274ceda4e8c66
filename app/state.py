"""Cached models and captures: the only file in the app that caches.

* Models: `st.cache_resource`, one per (name, dtype), shared read-only by every session.
* One process-wide lock around tokenization and inference (fast tokenizers are not thread-safe and
  two cores do not get faster with more threads). A request waits at most BUSY_WAIT_S for it and
  then fails with BusyError ("busy, retry") instead of hanging the page.
* Captures and derived tables: `st.cache_data(max_entries=...)`, keyed by model id, text and
  settings; they return picklable numpy data (AttentionRecords hold numpy arrays), never tensors.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import streamlit as st

from analysis.benchmarks import DEFAULT_PATH, read_benchmarks
from model.captured import GROUP_LABELS, CapturedRun  # noqa: F401 — pages read GROUP_LABELS and MASKS here
from model.loaded import MASK_CHOICES as MASKS  # noqa: F401

BUSY_WAIT_S = float(os.environ.get("ATTNLAB_BUSY_WAIT_S", "20"))
MAX_EAGER_CELLS = 8_000_000  # above this many stored cells a capture keeps q, k only and recomputes lazily


class BusyError(RuntimeError):
    """The inference lock was not free within BUSY_WAIT_S."""


# -- models and the inference lock -------------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def _inference_lock() -> threading.Lock:
    return threading.Lock()


@contextmanager
def inference():
    """Hold the process-wide inference lock; raise BusyError after a bounded wait."""
    lock = _inference_lock()
    if not lock.acquire(timeout=BUSY_WAIT_S):
        raise BusyError(f"The server is busy with other requests (waited {BUSY_WAIT_S:.0f} s). "
                        "Wait a few seconds and retry.")
    try:
        yield
    finally:
        lock.release()


@st.cache_resource(max_entries=6, show_spinner="Loading the model…")
def _load(name: str, dtype: str | None):
    import torch

    from model.registry import load, model_roots

    with inference():  # typed folders must lie inside the allowed model roots (ATTNLAB_MODEL_ROOTS)
        lm = load(name, dtype=getattr(torch, dtype) if dtype else None, roots=model_roots())
        lm.model.eval()
    return lm


def model(name: str, dtype: str | None = None):
    """The shared LoadedModel for a name or folder (read-only: never train or move it)."""
    return _load(name.strip(), dtype)


def default_model() -> str:
    from model.registry import bundled_names

    return "lecture-decoder" if "lecture-decoder" in bundled_names() else "random-decoder"


def bundled_names() -> list[str]:
    from model.registry import bundled_names as names

    return names()


def model_choices() -> list[str]:
    """Bundled models first, then minilm, then the random ones."""
    from model.registry import RANDOM, bundled_names

    return [*bundled_names(), "minilm", *RANDOM]


@st.cache_data(max_entries=16, show_spinner=False)
def model_info(name: str) -> dict:
    lm = model(name)
    info = lm.info()
    info["card"] = {k: v for k, v in (lm.card or {}).items() if isinstance(v, (str, int, float, list, dict))}
    info["has_logits"] = lm.has_logits
    return info


@st.cache_data(max_entries=16, show_spinner=False)
def model_card(name: str) -> str | None:
    """The README.md beside a bundled model's weights (written by this repository), or None."""
    from model.registry import BUNDLED_DIR

    if name not in bundled_names():
        return None
    path = BUNDLED_DIR / name / "README.md"
    return path.read_text(encoding="utf-8")[:20_000] if path.is_file() else None


# -- captures ----------------------------------------------------------------------------------------
@st.cache_data(max_entries=48, show_spinner=False)
def capture(name: str, text: str, src: str | None = None, backend: str = "eager", mask: tuple = ()) -> CapturedRun:
    """Run the model once with capture; cached by (model, text, source, backend, mask)."""
    lm = model(name)
    with inference():  # labels use the tokenizer: inside the lock
        run = lm.run(text, src, backend=backend, mask=mask)
    cells = sum(r.pattern_full.size for r in run.records.values() if r.pattern_full is not None)
    if cells > MAX_EAGER_CELLS:  # keep q and k only; patterns are recomputed exactly on demand
        run.records = {s: replace(r, scores_full=None, pattern_full=None) for s, r in run.records.items()}
    return run


# -- derived numbers that need the model (cached) -----------------------------------------------------
@st.cache_data(max_entries=32, show_spinner=False)
def relevance(name: str, text: str, src: str | None, position: int, target_id: int | None = None):
    """Chefer et al. 2021 gradient-weighted relevance (analysis.relevance) for one output position."""
    from analysis.relevance import gradient_relevance

    lm = model(name)
    with inference():
        return gradient_relevance(lm, lm.encode(text, src), position, target_id)


@st.cache_data(max_entries=32, show_spinner=False)
def flow(name: str, text: str, src: str | None, backend: str, group: str, query: int, residual: float) -> np.ndarray:
    """Attention flow (analysis.flow) into output position `query`; T ≤ 64."""
    from analysis.flow import attention_flow

    cap = capture(name, text, src, backend)
    return attention_flow(cap.matrices(group).astype(np.float64), query, residual=residual)


@st.cache_data(max_entries=16, show_spinner=False)
def head_table(name: str, text: str, src: str | None, backend: str, period: int = 0, seed: int = 0):
    """analysis.head_runs.model_head_statistics: one row per (stack, layer, head), with duplicate-token
    and induction scores from a random sequence repeated with `period` (0: the model's default)."""
    from analysis.head_runs import default_period, model_head_statistics

    lm = model(name)
    period = period or default_period(lm)
    with inference():
        df = model_head_statistics(lm, lm.encode(text, src), period=period, seed=seed, backend=backend)
    return df, period


@st.cache_data(max_entries=64, show_spinner=False)
def ablate(name: str, text: str, src: str | None, backend: str, site: str, head: int, position: int,
           target_id: int | None = None):
    """analysis.ablation.ablate_head: the prediction at `position` before and after zeroing one head."""
    from analysis.ablation import ablate_head

    lm = model(name)
    with inference():
        return ablate_head(lm, lm.encode(text, src), site, head, position, target_id, backend)


@st.cache_data(max_entries=16, show_spinner=False)
def ablation_sweep(name: str, text: str, src: str | None, backend: str, position: int,
                   target_id: int | None = None):
    """analysis.ablation.head_sweep: Δp(target) for every head zeroed in turn."""
    from analysis.ablation import head_sweep

    lm = model(name)
    with inference():
        return head_sweep(lm, lm.encode(text, src), position, target_id, backend)


def token_id(name: str, label: str) -> int | None:
    """The id of a single-token label (for 'explain this answer'), or None."""
    lm = model(name)
    with inference():
        return lm.single_token_id(label)


# -- part 2: mechanics pages ---------------------------------------------------------------------------
# KV cache, Backends, Step by step, Cross-attention, Positions, Generate. Numbers come from analysis.checks
# (the verdicts of `attnlab check`, one check at a time), analysis.kv_cache, analysis.backends,
# analysis.generation and analysis.positions; these wrappers only cache and take the lock.
BENCH_FILE = Path(__file__).resolve().parent.parent / DEFAULT_PATH  # the latest `attnlab bench` JSON


@st.cache_data(max_entries=16, show_spinner="Running the cache checks of `attnlab check`…")
def kv_cache_check(name: str, text: str, src: str | None = None):
    """analysis.checks.check_kv_cache: the cache verdict of `attnlab check` and its stitched matrices."""
    from analysis.checks import check_kv_cache

    lm = model(name)
    with inference():
        return check_kv_cache(lm, lm.encode(text, src))


@st.cache_data(max_entries=16, show_spinner="Generating with and without the cache…")
def greedy_cache_check(name: str, text: str, src: str | None = None):
    """analysis.checks.check_greedy_cache: the greedy-generation verdict of `attnlab check`."""
    from analysis.checks import check_greedy_cache

    lm = model(name)
    with inference():
        return check_greedy_cache(lm, lm.encode(text, src))


@st.cache_data(max_entries=16, show_spinner="Comparing the backends as `attnlab check` does…")
def backend_check(name: str, text: str, src: str | None, other: str):
    """analysis.checks.check_backend: the `eager_vs_<other>` verdict of `attnlab check` and its per-site numbers."""
    from analysis.checks import check_backend

    lm = model(name)
    with inference():
        return check_backend(lm, lm.encode(text, src), other)


@st.cache_data(max_entries=16, show_spinner=False)
def output_scale(name: str, text: str, src: str | None = None) -> dict:
    """max |logits| and max |hidden| of this input (analysis.backends.output_scale), to read a max |Δ| against."""
    from analysis.backends import output_scale as run

    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src))


@st.cache_data(max_entries=16, show_spinner="Generating with and without the cache…")
def cache_generation(name: str, text: str, src: str | None, n_new: int, backend: str) -> dict:
    """analysis.checks.generation_steps: greedy generation with and without the cache, judged step by step."""
    from analysis.checks import generation_steps as run
    from model.inputs import check_generate

    check_generate(n_new)  # MAX_GENERATE new tokens per request, whatever the caller asks
    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), n_new, backend)


@st.cache_data(max_entries=16, show_spinner="Running every prefix of the text…")
def prefix_stability(name: str, text: str, src: str | None, backend: str) -> dict:
    from analysis.kv_cache import prefix_stability as run

    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), backend)


@st.cache_data(max_entries=32, show_spinner="Generating…")
def generation_trace(name: str, text: str, src: str | None, n_new: int, temperature: float = 0.0,
                     top_k: int | None = None, seed: int | None = None, backend: str = "eager"):
    """analysis.generation.generation_trace: the generated tokens and each step's attention rows."""
    from analysis.generation import generation_trace as run
    from model.inputs import check_generate

    check_generate(n_new)  # MAX_GENERATE new tokens per request, whatever the caller asks
    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), n_new, temperature=temperature, top_k=top_k, seed=seed,
                   backend=backend)


@st.cache_data(max_entries=8, show_spinner="Timing the kernels on this machine…")
def attention_timings(lengths: tuple[int, ...], n_heads: int, d_head: int, repeats: int = 3) -> list[dict]:
    """Live time and peak memory of one attention call per backend and length (under the lock, so no
    other request runs at the same time)."""
    from analysis.backends import time_attention

    with inference():
        return time_attention(lengths, n_heads=n_heads, d_head=d_head, repeats=repeats)


@st.cache_data(ttl=300, show_spinner=False)
def benchmark_results() -> dict | None:
    """The latest `attnlab bench` JSON (docs/benchmarks.json), or None; plus docs/benchmarks.md's text."""
    out = read_benchmarks(BENCH_FILE)
    md = BENCH_FILE.with_suffix(".md")
    if md.is_file():
        out = (out or {"path": None, "machine": None, "rows": []}) | {"markdown": md.read_text(encoding="utf-8")}
    return out


@st.cache_data(max_entries=16, show_spinner=False)
def pattern_recovery(name: str, text: str, src: str | None, backend: str) -> list[dict]:
    """Per site: what a fused capture keeps (q, k) and how exactly its recomputed pattern matches eager."""
    from analysis.backends import recovery_report

    return recovery_report(capture(name, text, src, "eager").records, capture(name, text, src, backend).records)


@st.cache_data(max_entries=8, show_spinner="Reading the position embeddings…")
def position_table(name: str) -> tuple[str, np.ndarray | None]:
    from analysis.positions import position_table as run

    return run(model(name))


@st.cache_data(max_entries=16, show_spinner=False)
def lecture_alignment(name: str, preset_id: str | None) -> list[tuple[int, int]]:
    """(target index, source index) pairs of a translation sample, or []."""
    if not name.startswith("lecture-") or not preset_id:
        return []
    try:
        from model.lecture.samples import load_samples

        s = next((s for s in load_samples(name) if s.id == preset_id), None)
    except Exception:  # noqa: BLE001 — samples are optional
        return []
    return [tuple(p) for p in s.alignment] if s is not None else []


# -- long inputs (app/longinput.py) ---------------------------------------------------------------------
@st.cache_data(max_entries=4, show_spinner="Running the model over the long text…")
def long_capture(name: str, text: str):
    """The fused capture of a long `text` (q, k and mask per layer: about 20 MB at 4,096 tokens for a
    small model, never the [H, T, T] patterns)."""
    from app.longinput import run_capture

    lm = model(name)
    with inference():
        return run_capture(lm, text)


@st.cache_data(max_entries=32, show_spinner="Pooling the head…")
def long_overview(name: str, text: str, layer: int, head: int, how: str = "max"):
    """One head's pooled overview of a long capture."""
    from app.longinput import OVERVIEW_CELLS, head_overview

    cap = long_capture(name, text)
    with inference():  # torch over every row: one request at a time, like a forward pass
        return head_overview(cap, layer, head, OVERVIEW_CELLS, how)
