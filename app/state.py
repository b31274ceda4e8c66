"""The app's cached entry points and the process-wide inference lock: the only file in the app that caches.

* Models: `st.cache_resource`, one per (name, device, dtype), shared read-only by every session. The device
  and dtype (`app/run_settings.py`) come from `attnlab app --device/--dtype` (ATTNLAB_DEVICE / ATTNLAB_DTYPE) or, on
  a machine with CUDA, the sidebar's switch; every cached entry point is keyed by them too.
* One lock around tokenization and inference (fast tokenizers are not thread-safe and two cores do not get
  faster with more threads); a model under SMALL_MODEL parameters runs on one torch thread (`cpu_threads`).
  A request waits at most BUSY_WAIT_S for the lock, then fails with BusyError ("busy, retry") instead of
  hanging the page. Long work (app/job_entries.py) runs as an app.jobs job: in slices that take the lock one at a
  time, in a background thread, its result kept per (function, run settings, model, inputs).
* A memory budget (model.budget, from `attnlab app --max-memory/--max-tokens`: ATTNLAB_MAX_MEMORY /
  ATTNLAB_MAX_TOKENS): every entry point over a text asks it first (`guard`), and each forward pass checks too.
* Everything else: `st.cache_data(max_entries=...)` over a function of analysis or the model layer, keyed by
  model name, text and settings; results are picklable numpy data (records hold numpy arrays), never tensors.
  `on_model` and `on_text` make such an entry point; the numbers come from the function they wrap.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import streamlit as st
import torch
from attnlab.analysis.attention import flow as flow_
from attnlab.analysis.circuit import find as circuit_
from attnlab.analysis.faithfulness import store as kept_
from attnlab.analysis.faithfulness import why as why_
from attnlab.analysis.machinery import block_walk as block_
from attnlab.analysis.machinery import norm_variants as variants_
from attnlab.analysis.machinery import permutation
from attnlab.analysis.machinery import window_ppl as window_ppl_
from attnlab.analysis.probes import ablation
from attnlab.analysis.probes import attributions as attributions_
from attnlab.analysis.probes import context_mixing as mixing_
from attnlab.analysis.probes import dla as dla_
from attnlab.analysis.probes import head_table as head_runs
from attnlab.analysis.probes import image_run as images_
from attnlab.analysis.probes import lens as lens_
from attnlab.analysis.probes import patch_maps as vision_
from attnlab.analysis.probes import patching as patching_
from attnlab.analysis.probes import qk_attribution as qk_
from attnlab.analysis.probes import routing as routing_
from attnlab.analysis.probes import sinks as sinks_
from attnlab.analysis.probes.relevance import gradient_relevance
from attnlab.app import longinput, token_strip
from attnlab.app.jobs import BusyError, Jobs, SharedLock
from attnlab.app.run_settings import (
    placement_settings,
    run_settings,
)
from attnlab.model import budget, hooks
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import bundled_card, load, model_roots

budget.set_budget(budget.from_env())  # `attnlab app --max-memory/--max-tokens`: ATTNLAB_MAX_MEMORY/_TOKENS
BUSY_WAIT_S = float(os.environ.get("ATTNLAB_BUSY_WAIT_S", "20"))


# -- models and the inference lock -------------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def _inference_lock() -> SharedLock:
    return SharedLock()


@st.cache_resource(show_spinner=False)
def _jobs() -> Jobs:
    return Jobs(_inference_lock(), kept=16, busy_s=BUSY_WAIT_S)


@contextmanager
def inference():
    """Hold the process-wide inference lock; raise BusyError after a bounded wait. Between two blocks of a forward
    pass the holder lets every request waiting then go first (a long text on a large model never holds the class
    for its whole pass), its memory set aside meanwhile (model.budget.paused)."""
    lock = _inference_lock()
    if not lock.acquire(timeout=BUSY_WAIT_S):
        raise BusyError(f"The server is busy with other requests (waited {BUSY_WAIT_S:.0f} s). "
                        "Wait a few seconds and retry.")

    held = [True]

    def between(done: int, total: int) -> None:
        if lock.waiting():
            with budget.paused():
                held[0] = False
                lock.pass_on(BUSY_WAIT_S)  # BusyError when the lock stays taken: this request stops
                held[0] = True

    try:
        with hooks.between_steps(between), budget.backend_choice(None):  # a page has no backend to pick
            yield
    finally:
        if held[0]:
            lock.release()


SMALL_MODEL = 10_000_000  # parameters: a smaller model runs on one CPU thread (cpu_threads)


@contextmanager
def cpu_threads(lm: LoadedModel):
    """One torch thread while a model under SMALL_MODEL parameters runs on the CPU; larger models and GPUs as set."""
    if lm.device != "cpu" or sum(p.numel() for p in lm.model.parameters()) >= SMALL_MODEL:  # any model, views too
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # its ops gain ~nothing from more; with a browser on the same cores they wait on each other
    try:
        yield
    finally:
        torch.set_num_threads(old)


@st.cache_resource(max_entries=6, show_spinner="Loading the model…")
def _load(name: str, device: str, dtype: str) -> LoadedModel:
    with inference():  # typed folders must lie inside the allowed model roots (ATTNLAB_MODEL_ROOTS)
        return load(name, dtype=getattr(torch, dtype), device=device, roots=model_roots(), **placement_settings())


def model(name: str) -> LoadedModel:
    """The shared LoadedModel for a name or folder on this session's device and dtype (read-only: never
    train or move it)."""
    return _load(name.strip(), *run_settings())


def guard(lm: LoadedModel, inputs, reads: str, args: tuple, backend_arg: int | None = None) -> tuple:
    """`args` with the backend the budget allows (model.budget.plan), or InputError in one line."""
    n = max(inputs.ids.shape[1], 0 if inputs.src_ids is None else inputs.src_ids.shape[1])
    backend = args[backend_arg] if backend_arg is not None and len(args) > backend_arg else "eager"
    routed = budget.plan(lm.name, lm.cfg, n, dtype=lm.dtype, backend=backend, reads=reads, context=lm.context,
                         device=lm.device, route=backend_arg is not None)
    if routed == backend:
        return args
    return (*args[:backend_arg], routed, *args[backend_arg + 1:])


# -- the one pattern of a cached entry point ---------------------------------------------------------
def _cached(call: Callable, fn: Callable, entries: int, spinner: str | bool):
    """st.cache_data over `call(run, ...)`; the entry point passes run = run_settings() first, so a result
    is kept per device and dtype. `.clear()` empties it."""
    call.__qualname__ = call.__name__ = f"{fn.__module__}.{fn.__qualname__}"  # st.cache_data keys on it
    call.__doc__ = fn.__doc__
    cached = st.cache_data(max_entries=entries, show_spinner=spinner)(call)

    def entry(*args, **kw):
        return cached(run_settings(), *args, **kw)

    entry.__doc__, entry.clear = fn.__doc__, cached.clear
    return entry


def on_model(fn: Callable, entries: int = 16, spinner: str | bool = False):
    """Cached `(model name, *args) -> fn(lm, *args)`, run under the inference lock."""
    def call(run: tuple[str, str], name: str, *args, **kw):
        lm = _load(name.strip(), *run)
        with inference(), cpu_threads(lm):
            return fn(lm, *args, **kw)

    return _cached(call, fn, entries, spinner)


def on_text(fn: Callable, entries: int = 16, spinner: str | bool = False, reads: str = "patterns",
            backend_arg: int | None = None):
    """Cached `(model name, text, source text, *args) -> fn(lm, lm.encode(text, source), *args)`, under the lock.

    Before it runs, the server's memory budget (model.budget.plan) is asked whether a run that `reads` (every
    pattern, by default: what a page reading a capture holds) fits: a run that does not is refused in one line
    naming the most tokens that would fit. `backend_arg`: the position in *args of a backend that may be routed
    from eager to sdpa (lazy records) when only that fits."""
    def call(run: tuple[str, str], name: str, text: str, src: str | None = None, *args, **kw):
        lm = _load(name.strip(), *run)
        with inference(), cpu_threads(lm):  # tokenizing takes the lock too
            inputs = lm.encode(text, src)
            args = guard(lm, inputs, reads, args, backend_arg)
            return fn(lm, inputs, *args, **kw)

    return _cached(call, fn, entries, spinner)


# -- the model and one captured run ------------------------------------------------------------------
model_info = on_model(LoadedModel.describe)
token_id = on_model(LoadedModel.single_token_id, entries=64)
model_card = st.cache_data(max_entries=16, show_spinner=False)(bundled_card)
first_tokens = on_model(LoadedModel.first_tokens, entries=8)  # (name, text, source, limit) -> the start that fits
# (name, text, src, backend, mask) -> CapturedRun; eager routed to sdpa when only lazy records fit the budget
capture = on_text(LoadedModel.capture, entries=48, backend_arg=0)


# -- attribution and heads ---------------------------------------------------------------------------
relevance = on_text(gradient_relevance, entries=32, reads="grad")  # (name, text, src, position, target_id)
# (name, text, src, method, position, target_id)
attribution = on_text(attributions_.attribute, entries=48, reads="grad")
context_mixing = on_text(mixing_.context_mixing, entries=32)  # (name, text, src, method) -> [L, T, T]
head_table = on_text(head_runs.head_table)  # (name, text, src, backend) -> (DataFrame, period)
ablate = on_text(ablation.ablate_head, entries=64)  # (name, text, src, site, head, position, target_id, backend)
ablation_sweep = on_text(ablation.head_sweep)  # (name, text, src, position, target_id, backend)
# beyond attention: the logit lens, direct logit attribution, activation patching (name, texts, tokens, ...)
logit_lens = on_model(lens_.logit_lens, spinner="Reading every layer through the unembedding…")
logit_attribution = on_model(dla_.direct_logit_attribution)
# (name, text, src, layer, head, query, key) -> why the head attends there (analysis.probes.qk_attribution.QKAttribution)
qk_attribution = on_text(qk_.qk_attribution, entries=32)
qk_refusal = on_model(qk_.refusal)  # (name) -> why QK attribution does not apply, or None
patching = on_model(patching_.activation_patching, entries=8, spinner="Patching every layer, position and head…")


# (name, clean, corrupt, answer, wrong, method=, edges=, steps=) -> analysis.circuit.Circuit
circuit = on_model(circuit_.find_circuit, entries=8, spinner="Scoring every edge and running the circuits…")


def _flow(run, name: str, text: str, src: str | None, backend: str, group: str, query: int,
          residual: float) -> np.ndarray:
    return flow_.attention_flow(capture(name, text, src, backend).matrices(group).astype(np.float64), query,
                                residual=residual)


# (name, text, src, backend, group, query, residual) -> attention flow (analysis.attention.flow) into position `query`
# over a cached capture; T ≤ 64
flow = _cached(_flow, flow_.attention_flow, 32, False)


# -- long inputs -------------------------------------------------------------------------------------
long_capture = on_model(longinput.run_capture, entries=4, spinner="Running the model over the long text…")


def _long_overview(run, name: str, text: str, layer: int, head: int, how: str = "max") -> longinput.Overview:
    cap = long_capture(name, text)
    with inference():
        return longinput.head_overview(cap, layer, head, longinput.OVERVIEW_CELLS, how)


# (name, text, layer, head, how) -> one head's pooled overview of a cached long capture (under the lock)
long_overview = _cached(_long_overview, longinput.head_overview, 32, "Pooling the head…")


# -- permutation equivariance ------------------------------------------------------------------------
# (tokenizer's model name, text, order, seed) -> analysis.machinery.permutation.Study over random encoders (CPU)
permutation_study = on_model(permutation.permutation_study, entries=8,
                             spinner="Running the shuffled text through every scheme…")


# -- the Block page: the model's own path at one token, and random-weight variants side by side ---------
block_walk = on_text(block_.block_walk, entries=32)  # (name, text, src, position, temperature, top_k) -> BlockWalk
block_variants = on_text(variants_.compare_variants, entries=32)  # (name, text, src, kind, position, seed)
norm_leak = on_text(variants_.norm_leak, entries=32)  # (name, text, src, changed, new_id, seed) -> Leak


# -- judging explanations and vocabularies (Rollout page, token strips) --------------------------------------
vocabulary = on_model(token_strip.vocabulary)  # (name) -> {"name", "size", "unk_id", "scope"}
# (name, n, seed, ablation=False) -> the report of `attnlab faithfulness` (its "methods": top-1 per method), kept on
# disk per weights and examples (analysis.faithfulness.store): computed once per model, not on each first visit
faithfulness = on_model(kept_.kept_faithfulness, entries=8,
                        spinner="Scoring each method on held-out lecture examples (`attnlab faithfulness`)…")


faithfulness_path = on_model(kept_.report_path, entries=16)  # (name, n, seed, methods=, ablation=) -> its file


def kept_faithfulness(name: str, n: int, seed: int, **kw) -> dict | None:
    """The faithfulness report kept on disk for (name, n, seed, methods=, ablation=); None when it is not there
    (never computes: state.faithfulness does)."""
    return kept_.read_report(faithfulness_path(name, n, seed, **kw))


ranking_reasons = on_model(why_.reasons_for, entries=8)  # (name, n, seed) -> the numbers behind the ranking


# -- mixture of experts (the Routing page) ---------------------------------------------------------------
route_text = on_text(routing_.route_text, entries=32)  # (name, text, src, backend) -> (Routing, CapturedRun)
force_expert = on_text(routing_.force_expert_run, entries=64)  # (name, text, src, layer, position, expert, backend)
expert_specialisation = on_model(routing_.lecture_specialisation, entries=4,
                                 spinner="Routing held-out lecture examples through every layer…")  # (name, n)


# -- images: a ViT on the Vision page ------------------------------------------------------------------------
image_capture = on_model(images_.image_capture, entries=32)  # (name, image uint8 [H, W, 3], backend) -> run
image_view = on_model(images_.model_view, entries=32)  # (name, image) -> the image as the model reads it
image_gradient_map = on_model(images_.gradient_map, entries=32)  # (name, image, kind, target, discard)
image_mixing = on_model(images_.mixing_layers, entries=16)  # (name, image, kind) -> [L, T, T]
position_similarity = on_model(vision_.position_similarity, entries=4)  # (name) -> [N, rows, cols]
image_classes = on_model(images_.class_names, entries=8)  # (name) -> class names
shape_samples = st.cache_data(max_entries=16, show_spinner=False)(shape_images)  # (n, seed, split) -> samples


# -- attention sinks (the Sinks page) ----------------------------------------------------------------------------
sink_report = on_model(sinks_.measure_sinks, entries=8,
                       spinner="Measuring every head's share on the first token over the sample texts…")  # (name)
window_test = on_model(window_ppl_.window_test, entries=8,
                       spinner="The window test: the long text with full attention, a window with and without "
                               "sinks…")  # (name, window) -> WindowPPL
