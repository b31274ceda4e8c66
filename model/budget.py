"""The memory budget of a run: what one run of T tokens needs on top of the loaded model, what this process may
still use, and the most tokens that fit — decided before the run starts, from model.memory's estimate.

    need(reads)   = (activations of estimate_bytes(cfg, T, dtype, backend) − T·V·8) · batch, plus what is read
                    (T·V·8: the logits' float32 softmax and copy, which LoadedModel.run makes 256 rows at a time):
        "run"       the records the run keeps (the Python API, the CLI), an eager run's patterns counted twice
                    (S·H·T²·4 more: the allocator's slack over L layers of T² buffers, measured)
        "bare"      less the kept patterns (a forward pass that keeps no record), no slack
        "patterns"  "run" + 2 · S · H · T² · 4   every pattern stacked into one float32 [L, H, T, T] (and its
                                                 copy), the way a page reads a capture (CapturedRun.matrices)
        "grad"      "run" + 2 · S · H · T² · 4   a backward pass: every layer's pattern and its gradient
                    + 2 · 4 · T · max(D, F) · b · L   the activations each layer keeps for the backward pass
        "pooled"    as "run": a fused run's lazy records are read a block of rows at a time (O(heads·rows·T))

    need          × MARGIN (what the allocator holds beyond the tensors; see tests/model/test_budget.py)
    allowance     = min(FIT_SHARE × the memory available now, max_bytes − this process's resident memory now)

`max_bytes` is the server's budget for the whole process (`attnlab app --max-memory GB`, ATTNLAB_MAX_MEMORY);
None (the Python API, the CLI) leaves only what is free. `caps` are per-model token caps a lecturer sets
(`--max-tokens smollm2=2048`, ATTNLAB_MAX_TOKENS="smollm2=2048,…"). One process-wide Budget: `set_budget`.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from attnlab.model import loaded
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import InputError
from attnlab.model.memory import FIT_SHARE, GB, as_dtype, available_bytes, estimate_bytes, fmt_gb, n_sites

READS = ("run", "bare", "patterns", "grad", "pooled")
SMALL = 64 * 2**20  # bytes: a run needing less is never checked (no /proc read on every small forward pass)
ENV_MEMORY, ENV_TOKENS = "ATTNLAB_MAX_MEMORY", "ATTNLAB_MAX_TOKENS"
SERVER_SHARE = 0.5  # a server's default budget: this share of the memory available when it starts
MARGIN = 1.5  # the estimate × this: measured peaks were 0.77–1.3 × the bare estimate (allocator slack)


@dataclass(frozen=True)
class Budget:
    max_bytes: int | None = None  # the process's resident memory may not pass this; None: only what is free
    caps: dict[str, int] = field(default_factory=dict)  # model name → most tokens one text may have


_budget = Budget()
_NEED: ContextVar[int] = ContextVar("attnlab_forward_need", default=0)  # this thread's forward pass: its need
_CHOICE: ContextVar[str | None] = ContextVar("attnlab_backend_choice", default="backend='sdpa'")
_aside: dict[int, int] = {}  # thread → bytes its paused forward pass may still add (see `paused`)
_aside_lock = threading.Lock()


def set_budget(budget: Budget) -> Budget:
    """Make `budget` this process's budget; returns the one it replaces."""
    global _budget
    old, _budget = _budget, budget
    return old


def budget() -> Budget:
    return _budget


# -- the settings a lecturer gives ---------------------------------------------------------------------------------
def parse_memory(value) -> int:
    """Bytes from a number of GB (10⁹ bytes) given as text or a number; InputError unless it is positive."""
    try:
        gb = float(value)
    except (TypeError, ValueError):
        raise InputError(f"--max-memory must be a number of GB, got {value!r}") from None
    if not gb > 0 or gb == float("inf"):
        raise InputError(f"--max-memory must be a positive number of GB, got {value}")
    return int(gb * GB)


def parse_caps(items) -> dict[str, int]:
    """{'smollm2': 2048} from ['smollm2=2048', …] or 'smollm2=2048,lecture-decoder=64'; InputError for a bad
    item or a cap below 1."""
    if isinstance(items, str):
        items = [s for s in items.split(",") if s.strip()]
    caps = {}
    for item in items or ():
        name, sep, n = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"--max-tokens takes MODEL=TOKENS (e.g. smollm2=2048), got {item!r}")
        try:
            cap = int(n.strip().replace("_", ""))
        except ValueError:
            raise InputError(f"--max-tokens {name}= must be a whole number of tokens, got {n.strip()!r}") from None
        if cap < 1:
            raise InputError(f"--max-tokens {name}= must be at least 1 token, got {cap}")
        caps[name] = cap
    return caps


def from_env(environ=None) -> Budget:
    """The server's Budget from ATTNLAB_MAX_MEMORY (GB) and ATTNLAB_MAX_TOKENS (set by `attnlab app`)."""
    env = os.environ if environ is None else environ
    mem = env.get(ENV_MEMORY)
    return Budget(parse_memory(mem) if mem else None, parse_caps(env.get(ENV_TOKENS, "")))


def server_default(loaded_bytes: int = 0) -> int | None:
    """A server's default budget: SERVER_SHARE of the memory available now, plus what this process already
    holds, less `loaded_bytes` of models it is about to load (None when nothing can be read)."""
    free = available_bytes()
    if free is None:
        return None
    return max(int(SERVER_SHARE * free) + rss_bytes() - int(loaded_bytes), 1)


# -- what this process may still use --------------------------------------------------------------------------------
def rss_bytes() -> int:
    """This process's resident memory now (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def allowance(device: str | None = None) -> int | None:
    """Bytes a run may still add: FIT_SHARE of what is free, and the budget less what this process holds and what
    the runs paused between two blocks on other threads may still add."""
    free = available_bytes(device)
    found = [] if free is None else [int(FIT_SHARE * free)]
    if _budget.max_bytes is not None and (device is None or not str(device).startswith("cuda")):
        me = threading.get_ident()
        with _aside_lock:
            held = sum(b for t, b in _aside.items() if t != me)
        found.append(max(_budget.max_bytes - rss_bytes() - held, 0))
    return min(found) if found else None


@contextmanager
def paused():
    """While this thread's forward pass waits between two blocks (a server lets other requests run there), its
    whole need counts against every other run's allowance, so two long runs never share one budget twice."""
    me = threading.get_ident()
    with _aside_lock:
        _aside[me] = _NEED.get()
    try:
        yield
    finally:
        with _aside_lock:
            _aside.pop(me, None)


# -- what a run needs -------------------------------------------------------------------------------------------------
def need_bytes(cfg: ModelConfig, n_tokens: int, dtype=torch.float32, backend: str = "eager", reads: str = "run",
               batch: int = 1) -> int:
    """Bytes a run of `batch` texts of `n_tokens` adds to the loaded model (the module docstring's formula); a
    transformers view (its config is not a ModelConfig) by `view_need_bytes`."""
    if reads not in READS:
        raise ValueError(f"unknown read {reads!r}; choose {', '.join(READS)}")
    if not isinstance(cfg, ModelConfig):
        return view_need_bytes(cfg, n_tokens, reads, batch)
    t, b = int(n_tokens), as_dtype(dtype).itemsize
    est = estimate_bytes(cfg, t, dtype, backend)
    sites, _ = n_sites(cfg)
    stack = sites * cfg.n_heads * t * t * 4
    softmax = est["logits"] // (b + 8) * 8  # the logits' float32 softmax and its copy: T·V·8
    slack = est["patterns"]  # an eager run's kept patterns, counted twice (measured: 1.6× the bare estimate)
    extra = {"run": slack, "pooled": slack, "bare": -est["patterns"], "patterns": slack + 2 * stack,
             "grad": slack + 2 * stack + 8 * t * max(cfg.d_model, cfg.hidden) * b * sites}[reads]
    return int(MARGIN * (est["activations"] - softmax + extra) * max(int(batch), 1))


def view_need_bytes(cfg, n_tokens: int, reads: str = "run", batch: int = 1) -> int:
    """A transformers view's run (always eager with output_attentions): its float32 patterns of every attention
    site, held by transformers and copied once for the record, plus the logits' softmax; three times the patterns
    with a backward pass."""
    t = int(n_tokens)
    sites = cfg.n_layers + 2 * cfg.dec_layers  # an encoder–decoder's decoder has self- and cross-attention
    patterns = sites * cfg.n_heads * t * t * 4
    logits = t * cfg.vocab_size * 8 if cfg.has_logits else 0
    return int(MARGIN * ((3 if reads == "grad" else 2) * patterns + logits) * max(int(batch), 1))


def most_tokens(cfg: ModelConfig, limit: int, allow: int, dtype=torch.float32, backend: str = "eager",
                reads: str = "run", batch: int = 1) -> int:
    """The most tokens (≤ limit) whose run needs at most `allow` bytes; 0 when not even one token fits."""
    lo, hi = 0, int(limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need_bytes(cfg, mid, dtype, backend, reads, batch) <= allow:
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan(name: str, cfg: ModelConfig, n_tokens: int, *, dtype=torch.float32, backend: str = "eager",
         reads: str = "run", context: int | None = None, device: str | None = None, route: bool = False,
         where: str = "on this page on this server") -> str:
    """The backend a run of `n_tokens` goes on: `backend` when it fits; with `route`, 'sdpa' (lazy records)
    when eager does not but sdpa does. Otherwise InputError, one line naming the limit and what would fit:
    "On this page on this server smollm2 reads at most 1,210 tokens (5,600 tokens need about 9.1 GB (eager);
    2.4 GB of its 4.00 GB budget is left): shorten the text"."""
    cap = _budget.caps.get(name)
    if cap is not None and n_tokens > cap:
        raise InputError(f"On this server {name} reads at most {cap:,} tokens (the lecturer's cap); this text "
                         f"has {n_tokens:,}: shorten it")
    need = need_bytes(cfg, n_tokens, dtype, backend, reads)
    if need < SMALL:
        return backend
    allow = allowance(device)
    if allow is None or need <= allow:
        return backend
    if route and backend == "eager" and need_bytes(cfg, n_tokens, dtype, "sdpa", reads) <= allow:
        return "sdpa"
    n = most_tokens(cfg, min(context or n_tokens, n_tokens), allow, dtype, backend, reads)
    left = (f"{fmt_gb(allow)} of its {fmt_gb(_budget.max_bytes)} budget is left" if _budget.max_bytes is not None
            else f"{fmt_gb(allow)} is free")
    raise InputError(f"{where[:1].upper()}{where[1:]} {name} reads at most {n:,} tokens ({n_tokens:,} tokens need about "
                     f"{fmt_gb(need)} ({backend}); {left}): shorten the text")


@contextmanager
def backend_choice(how: str | None):
    """How the caller of the forward passes in this block may pick their backend, which check_forward's refusal
    names when the lazy records (sdpa) would fit: "backend='sdpa'" (the Python API, the default), "--backend sdpa"
    (a command with that option), None (a command or page without a choice: it names only the tokens that fit)."""
    token = _CHOICE.set(how)
    try:
        yield
    finally:
        _CHOICE.reset(token)


def check_forward(name: str, cfg, n_tokens: int, dtype, backend: str, *, batch: int = 1, patterns: bool = True,
                  grad: bool = False, device: str | None = None) -> None:
    """Before a forward pass of the Python API: InputError, one line saying what it would need and what fits,
    when it would pass the allowance (the run would otherwise be killed for memory)."""
    if not isinstance(cfg, ModelConfig):
        _NEED.set(0)
        return
    reads = "grad" if grad else "run" if patterns else "bare"  # bare: the run's T² lives one layer at a time
    need = need_bytes(cfg, n_tokens, dtype, backend, reads, batch)
    _NEED.set(need)
    if need < SMALL:
        return
    allow = allowance(device)
    if allow is None or need <= allow:
        return
    how, hint = _CHOICE.get(), ""
    if how and backend == "eager" and not grad and need_bytes(cfg, n_tokens, dtype, "sdpa", reads, batch) <= allow:
        hint = f"run it with {how} (lazy records, exact patterns on demand) or "
    n = most_tokens(cfg, n_tokens, allow, dtype, backend, reads, batch)
    what = f"{batch} × {n_tokens:,}" if batch > 1 else f"{n_tokens:,}"
    raise InputError(f"This {backend}{' gradient' if grad else ''} run of {name} on {what} tokens needs about "
                     f"{fmt_gb(need)} more but this process may use {fmt_gb(allow)} more; {hint}"
                     f"shorten the text to at most {n:,} tokens")


def _before_forward(lm, inputs, backend: str, *, grad: bool, patterns: bool) -> None:
    """check_forward for one LoadedModel.forward call (registered in model.loaded.BEFORE_FORWARD)."""
    n = max(inputs.ids.shape[1], 0 if inputs.src_ids is None else inputs.src_ids.shape[1])
    check_forward(lm.name, lm.cfg, n, lm.dtype, backend, batch=inputs.ids.shape[0], grad=grad, patterns=patterns,
                  device=lm.device)


loaded.BEFORE_FORWARD.append(_before_forward)
