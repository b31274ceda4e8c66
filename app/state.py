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
from dataclasses import dataclass, field, replace

import numpy as np
import streamlit as st

from model.record import AttentionRecord

BUSY_WAIT_S = float(os.environ.get("ATTNLAB_BUSY_WAIT_S", "20"))
TOP_K = 5
MAX_EAGER_CELLS = 8_000_000  # above this many stored cells a capture keeps q, k only and recomputes lazily
MASKS = ("default", "causal", "bidirectional", "sliding_window", "prefix_lm", "padding")


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
    info["has_logits"] = lm.arch == "encdec" or lm.cfg.lm_head != "none"
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
GROUP_LABELS = {"self": "self-attention", "encoder": "encoder self-attention",
                "decoder": "decoder self-attention", "cross": "cross-attention (target → source)"}


@dataclass
class Captured:
    """One forward pass: tokens, one AttentionRecord per site, and the top predictions per position."""

    model: str
    arch: str
    tokens: list[str]
    src_tokens: list[str] | None
    records: dict[str, AttentionRecord]
    backend: str
    mask: tuple
    top_ids: np.ndarray | None = None  # int [T, K]
    top_tokens: list[list[str]] | None = None  # [T][K]
    top_probs: np.ndarray | None = None  # float [T, K]
    ids: list[int] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)

    # -- site groups --------------------------------------------------------------------------------
    def groups(self) -> dict[str, list[str]]:
        """Group name -> sites ordered by layer: 'self' (one stack) or 'encoder', 'decoder', 'cross'."""
        out: dict[str, list[str]] = {}
        for site, rec in self.records.items():
            if self.arch != "encdec":
                g = "self"
            else:
                g = "cross" if rec.kind == "cross" else rec.stack
            out.setdefault(g, []).append(site)
        return {g: sorted(s, key=lambda x: self.records[x].layer) for g, s in out.items()}

    def group_tokens(self, group: str) -> tuple[list[str], list[str]]:
        """(query-axis tokens, key-axis tokens) of a group."""
        if group == "encoder":
            return self.src_tokens, self.src_tokens
        if group == "cross":
            return self.tokens, self.src_tokens
        return self.tokens, self.tokens

    def sites(self, group: str) -> list[str]:
        return self.groups()[group]

    def stack(self, group: str, kind: str = "pattern") -> np.ndarray:
        """float32 [L, H, q, k] of a group: 'pattern', 'scores' (scaled, unmasked), 'masked' (−inf) or 'raw'."""
        get = {"pattern": AttentionRecord.pattern, "scores": AttentionRecord.scores,
               "masked": AttentionRecord.masked_scores, "raw": AttentionRecord.raw_qk}[kind]
        return np.stack([get(self.records[s]) for s in self.sites(group)]).astype(np.float32)

    def mask_of(self, group: str) -> np.ndarray:
        """bool [q, k], True = may attend (the first layer's; every layer of a stack shares it)."""
        return self.records[self.sites(group)[0]].mask_for()

    @property
    def n_heads(self) -> int:
        return next(iter(self.records.values())).n_heads

    @property
    def query_tokens(self) -> list[str]:
        return self.tokens


def _mask_spec(mask: tuple, t: int, arch: str):
    """A MaskSpec for the decoder/encoder self-attention, or None for the model's own default."""
    import torch

    from model.masks import MaskSpec

    kind = mask[0] if mask else "default"
    if kind == "default":
        return None
    if kind in ("causal", "bidirectional"):
        return MaskSpec(kind)
    if kind == "sliding_window":
        return MaskSpec("sliding_window", window=int(mask[1]))
    if kind == "prefix_lm":
        return MaskSpec("prefix_lm", prefix=int(mask[1]))
    if kind == "padding":
        from analysis.masks import bidirectional, causal, padding

        n_pad = int(mask[1])
        if not 0 <= n_pad < t:
            raise ValueError(f"padding must leave at least one real token: {n_pad} of {t} tokens")
        base = causal(t) if arch != "encoder" else bidirectional(t)
        return MaskSpec("custom", custom=torch.from_numpy(base & padding(t - n_pad, t)))
    raise ValueError(f"unknown mask {kind!r}; choose one of {', '.join(MASKS)}")


def _top(logits, lm, k: int = TOP_K):
    import torch

    if logits is None:
        return None, None, None
    probs = torch.softmax(logits[0].float(), dim=-1)  # [T, V]
    p, i = probs.topk(min(k, probs.shape[-1]), dim=-1)
    ids = i.numpy()
    return ids, [[lm.label(j) for j in row] for row in ids.tolist()], p.numpy()


@st.cache_data(max_entries=48, show_spinner=False)
def capture(name: str, text: str, src: str | None = None, backend: str = "eager", mask: tuple = ()) -> Captured:
    """Run the model once with capture; cached by (model, text, source, backend, mask)."""
    lm = model(name)
    with inference():
        inputs = lm.encode(text, src)
        spec = _mask_spec(mask, inputs.ids.shape[1], lm.arch)
        run = lm.run(text, src, backend=backend, mask=spec, inputs=inputs)
        top_ids, top_tokens, top_probs = _top(run.logits, lm)  # labels use the tokenizer: inside the lock
    records = {s: run.capture[s] for s in run.capture.sites}
    cells = sum(r.pattern_full.size for r in records.values() if r.pattern_full is not None)
    if cells > MAX_EAGER_CELLS:  # keep q and k only; patterns are recomputed exactly on demand
        records = {s: replace(r, scores_full=None, pattern_full=None) for s, r in records.items()}
    return Captured(name, lm.arch, list(run.inputs.tokens), run.inputs.src_tokens, records, backend, mask,
                    top_ids, top_tokens, top_probs, ids=run.inputs.ids[0].tolist(),
                    kernels=sorted({r.kernel for r in records.values()}))


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
    return attention_flow(cap.stack(group).astype(np.float64), query, residual=residual)


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


@dataclass
class Prediction:
    position: int
    tokens: list[str]  # top-k labels
    probs: np.ndarray  # [K]
    target: str  # the token tracked
    target_id: int
    target_prob: float


def _predict(logits, lm, position: int, target_id: int | None) -> Prediction:
    import torch

    probs = torch.softmax(logits[0, position].float(), dim=-1)
    p, i = probs.topk(min(TOP_K, probs.shape[-1]))
    tid = int(i[0]) if target_id is None else int(target_id)
    return Prediction(position, [lm.label(j) for j in i.tolist()], p.numpy(), lm.label(tid), tid, float(probs[tid]))


def _zero(site: str, head: int) -> dict:
    from model.hooks import zero_head

    return {f"{site}.hook_z": zero_head(head)}


@st.cache_data(max_entries=64, show_spinner=False)
def ablate(name: str, text: str, src: str | None, backend: str, site: str, head: int, position: int,
           target_id: int | None = None) -> tuple[Prediction, Prediction]:
    """The prediction at `position` with all heads, and with head `head` of `site` zeroed (its output z)."""
    lm = model(name)
    with inference():
        inputs = lm.encode(text, src)
        base = lm.run(text, src, backend=backend, inputs=inputs, names=[])
        if base.logits is None:
            raise ValueError(f"{name} has no prediction head, so there is no prediction to change; "
                             "pick a model with a language-model head")
        before = _predict(base.logits, lm, position, target_id)
        after_run = lm.run(text, src, backend=backend, inputs=inputs, interventions=_zero(site, head))
        after = _predict(after_run.logits, lm, position, before.target_id)
    return before, after


@st.cache_data(max_entries=16, show_spinner=False)
def ablation_sweep(name: str, text: str, src: str | None, backend: str, position: int,
                   target_id: int | None = None) -> tuple[list[str], np.ndarray, Prediction]:
    """Δp(target) when each head of each site is zeroed in turn: (sites, [sites, H], prediction)."""
    lm = model(name)
    with inference():
        inputs = lm.encode(text, src)
        base = lm.run(text, src, backend=backend, inputs=inputs)
        if base.logits is None:
            raise ValueError(f"{name} has no prediction head; pick a model with a language-model head")
        before = _predict(base.logits, lm, position, target_id)
        sites = list(base.capture.sites)
        out = np.zeros((len(sites), lm.cfg.n_heads))
        for i, site in enumerate(sites):
            for h in range(lm.cfg.n_heads):
                r = lm.run(text, src, backend=backend, inputs=inputs, interventions=_zero(site, h), names=[])
                out[i, h] = _predict(r.logits, lm, position, before.target_id).target_prob - before.target_prob
    return sites, out, before


def token_id(name: str, label: str) -> int | None:
    """The id of a single-token label (for 'explain this answer'), or None."""
    lm = model(name)
    with inference():
        try:
            enc = lm.tokenizer.encode(label, add_special=False)
        except TypeError:
            enc = lm.tokenizer.encode(label)
    ids = [i for i, sp in zip(enc.ids, enc.special or [False] * len(enc.ids)) if not sp]
    return ids[0] if len(ids) == 1 else None


# -- part 2: mechanics pages ---------------------------------------------------------------------------
# KV cache, Backends, Step by step, Cross-attention, Positions, Generate. Numbers come from
# analysis.mechanics and analysis.consistency; these wrappers only cache and take the lock.
BENCH_FILES = ("docs/benchmarks.json", "docs/bench.json", "benchmarks.json")


@st.cache_data(max_entries=16, show_spinner="Running the checks of `attnlab check`…")
def check_report(name: str, text: str, src: str | None = None) -> dict:
    """`attnlab check` on this input (analysis.consistency.run_checks), the verdict of two pages."""
    from analysis.consistency import run_checks

    lm = model(name)
    with inference():
        return run_checks(lm, lm.encode(text, src))


@st.cache_data(max_entries=16, show_spinner=False)
def output_scale(name: str, text: str, src: str | None = None) -> dict:
    """max |logits| and max |hidden| of this input (analysis.mechanics.output_scale), to read a max |Δ| against."""
    from analysis.mechanics import output_scale as run

    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src))


@st.cache_data(max_entries=16, show_spinner=False)
def backend_reports(name: str, text: str, src: str | None = None) -> dict[str, dict]:
    """analysis.consistency.backend_report of sdpa and flash against eager."""
    from analysis.consistency import backend_report

    lm = model(name)
    with inference():
        inputs = lm.encode(text, src)
        return {b: backend_report(lm, inputs, b) for b in ("sdpa", "flash")}


@st.cache_data(max_entries=16, show_spinner="Generating with and without the cache…")
def cache_generation(name: str, text: str, src: str | None, n_new: int, backend: str) -> dict:
    from analysis.mechanics import cache_generation as run
    from model.inputs import check_generate

    check_generate(n_new)  # MAX_GENERATE new tokens per request, whatever the caller asks
    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), n_new, backend)


@st.cache_data(max_entries=16, show_spinner=False)
def cache_stitched(name: str, text: str, src: str | None, backend: str) -> dict:
    from analysis.mechanics import cache_stitched as run

    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), backend)


@st.cache_data(max_entries=16, show_spinner="Running every prefix of the text…")
def prefix_stability(name: str, text: str, src: str | None, backend: str) -> dict:
    from analysis.mechanics import prefix_stability as run

    lm = model(name)
    with inference():
        return run(lm, lm.encode(text, src), backend)


@st.cache_data(max_entries=32, show_spinner="Generating…")
def generation_trace(name: str, text: str, src: str | None, n_new: int, temperature: float = 0.0,
                     top_k: int | None = None, seed: int | None = None, backend: str = "eager"):
    """analysis.mechanics.generation_trace: the generated tokens and each step's attention rows."""
    from analysis.mechanics import generation_trace as run
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
    from analysis.mechanics import time_attention

    with inference():
        return time_attention(lengths, n_heads=n_heads, d_head=d_head, repeats=repeats)


@st.cache_data(ttl=300, show_spinner=False)
def benchmark_results() -> dict | None:
    """The latest `attnlab bench` JSON (docs/benchmarks.json), or None; plus docs/benchmarks.md's text."""
    from pathlib import Path

    from analysis.mechanics import read_benchmarks

    root = Path(__file__).resolve().parent.parent
    out = read_benchmarks([root / p for p in BENCH_FILES])
    md = root / "docs" / "benchmarks.md"
    if md.is_file():
        out = (out or {"path": None, "machine": None, "rows": []}) | {"markdown": md.read_text(encoding="utf-8")}
    return out


@st.cache_data(max_entries=16, show_spinner=False)
def pattern_recovery(name: str, text: str, src: str | None, backend: str) -> list[dict]:
    """Per site: what a fused capture keeps (q, k) and how exactly its recomputed pattern matches eager."""
    from analysis.mechanics import recovery_report

    return recovery_report(capture(name, text, src, "eager").records, capture(name, text, src, backend).records)


@st.cache_data(max_entries=8, show_spinner="Reading the position embeddings…")
def position_table(name: str) -> tuple[str, np.ndarray | None]:
    from analysis.mechanics import position_table as run

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
