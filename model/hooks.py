"""Capture and intervention through a ContextVar: a shared model never carries hook state.

Every attention site calls `active()` once per forward; with nothing capturing that is the whole cost.
Inside `with capture() as cap:` the sites write `AttentionRecord`s into `cap` (and, when asked, the
tensors of named hook points); `interventions` replace a hook's value for that run only.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from attnlab.model.record import AttentionRecord
from attnlab.model.router_record import RouterRecord

# Hook points are declared where they fire, as class attributes: Attention.HOOKS (model/attention.py), Block.HOOKS
# and Block.CROSS_HOOKS (model/layers.py), MLP.HOOKS, MoE.HOOKS, Embeddings.HOOKS, PatchEmbed.HOOKS and NormHooks.HOOKS
# (model/norms.py: each norm's hook_scale, hook_normalized under its TL name, Block.norm_names and Stack.FINAL_NORM);
# each module's hook_names() derives its full names from them (model/stack.py: the whole model's).
# TransformerLens's layouts: hook_q [B, pos, head, d_head]; hook_k, hook_v [B, pos, kv_head, d_head] (the k/v heads
# of grouped-query attention, as TL's GroupedQueryAttention); hook_z [B, pos, head, d_head]; hook_result
# [B, pos, head, d_model]; hook_attn_scores, hook_pattern [B, head, q, k]. The axis of each that indexes heads:
HEAD_AXIS = {"hook_q": 2, "hook_k": 2, "hook_v": 2, "hook_z": 2, "hook_result": 2, "hook_attn_scores": 1,
             "hook_pattern": 1}

Intervention = Callable[[torch.Tensor, str], torch.Tensor]


def point(site: str, name: str) -> str:
    """The full hook name of `name` under `site` ('' at the root: 'hook_embed')."""
    return f"{site}.{name}" if site else name

_ACTIVE: ContextVar[Capture | None] = ContextVar("attnlab_capture", default=None)
_BETWEEN: ContextVar[Callable[[int, int], None] | None] = ContextVar("attnlab_between_steps", default=None)


def active() -> Capture | None:
    """The capture of the current thread/context, or None."""
    return _ACTIVE.get()


class Capture:
    """What one `capture()` block collected: records per site and the requested hook tensors."""

    def __init__(
        self,
        names: str | Iterable[str] | Callable[[str], bool] | None = None,
        interventions: dict[str, Intervention] | None = None,
        records: bool = True,
        detach: bool = True,
        split_inputs: bool = False,
        patterns: bool = True,
    ):
        self._records: dict[str, list[AttentionRecord]] = {}
        self._pending: list[tuple] = []  # (site, build, args): a record made when the records are first read
        self.tensors: dict[str, list[torch.Tensor]] = {}
        self.routers: dict[str, list[RouterRecord]] = {}  # mixture-of-experts routers (model/moe.py)
        self.interventions = dict(interventions or {})
        self.keep_records = records
        self.keep_patterns = patterns  # False: an eager record keeps q and k only (patterns recomputed when read)
        self.detach = detach
        self.split_inputs = split_inputs  # every receiver reads its own copy of the stream (*.SPLIT_HOOKS)
        self._want = name_filter(names)
        self._kept: set[int] = set()  # the memory of the kept tensors (data pointers of their storages)
        # records only: no hook kept or changed, so the blocks and MLPs take their plain path and an attention
        # site fires none of its hooks (a 32-layer capture paid ~90 µs a layer of Python for hooks that did nothing)
        self.records_only = names is None and not self.interventions and not split_inputs

    # -- used by the attention sites -------------------------------------------------------------
    def wants_any(self, names: Iterable[str]) -> bool:
        """True when any of these hooks (a site's scores/pattern hooks) is kept or intervened on."""
        return any(self.touches(n) for n in names)

    def changes_any(self, names: Iterable[str]) -> bool:
        """True when a site's output must come from its materialised pattern (`names`: its pattern hooks): one is
        intervened on, or a kept one must carry gradients (detach=False). Only kept, the pattern is computed beside
        a fused kernel."""
        return any(n in self.interventions for n in names) or (not self.detach and self.wants_any(names))

    def wants_tensor(self, name: str) -> bool:
        """True when `hook(name, ...)` keeps the tensor it is given."""
        return self._want(name)

    def touches(self, name: str) -> bool:
        """True when `name` is kept or intervened on (a hook computed only on demand, e.g. hook_result)."""
        return name in self.interventions or self._want(name)

    def hook(self, name: str, x: torch.Tensor) -> torch.Tensor:
        fn = self.interventions.get(name)
        if fn is not None:
            if x.untyped_storage().data_ptr() in self._kept:
                x = x.clone()  # a kept tensor shares this memory (resid_post i is resid_pre i+1): an in-place change
            x = _checked(name, x, fn(x, name))  # must not rewrite what was kept
        if self._want(name):
            self.tensors.setdefault(name, []).append(x.detach() if self.detach else x)
            self._kept.add(x.untyped_storage().data_ptr())
        return x

    def add(self, site: str, build: Callable[..., AttentionRecord], *args) -> None:
        """The record of `site` from this forward, build(*args), made when the records are first read (a forward
        pays one append a site: a 32-layer records-only capture paid ~10 µs a layer building records it may never
        read whole)."""
        if self.keep_records:
            self._pending.append((site, build, args))

    def add_router(self, record: RouterRecord) -> None:
        self.routers.setdefault(record.site, []).append(record)

    # -- used by callers ---------------------------------------------------------------------------
    @property
    def records(self) -> dict[str, list[AttentionRecord]]:
        """Each site's records, one per forward in the order they ran."""
        if self._pending:
            for site, build, args in self._pending:
                self._records.setdefault(site, []).append(build(*args))
            self._pending.clear()
        return self._records

    @property
    def sites(self) -> list[str]:
        return list(self.records)

    def __getitem__(self, site: str) -> AttentionRecord:
        """The record of `site` from a single forward (use `steps(site)` after generation)."""
        recs = self.records[site]
        if len(recs) != 1:
            raise KeyError(f"{site} has {len(recs)} records (one per forward); use steps({site!r})")
        return recs[0]

    def steps(self, site: str) -> list[AttentionRecord]:
        return self.records[site]

    def tensor(self, name: str, step: int = -1) -> torch.Tensor:
        """The value hook `name` had (at forward `step`); KeyError in one line when this run did not keep it."""
        if name not in self.tensors:
            kept = f"{len(self.tensors)} hooks were kept" if self.tensors else "no hook tensor was kept"
            raise KeyError(f"{name} was not kept in this run ({kept}): name it in names=, e.g. names={name!r}")
        return self.tensors[name][step]

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)


def _checked(name: str, x: torch.Tensor, out) -> torch.Tensor:
    """An intervention's result on hook `name`'s value x: x itself when it returned None (it changed x in place, as a
    TransformerLens hook may); one-line ValueError for anything but a tensor of x's shape, or of a shape x broadcasts
    to (a batch of one made a batch of several, as integrated gradients' path does)."""
    if out is None:
        return x
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"the intervention on {name} returned {type(out).__name__}; return a tensor of shape "
                         f"{tuple(x.shape)} or None (after changing it in place)")
    if out.shape != x.shape and not _broadcasts(x.shape, out.shape):
        raise ValueError(f"the intervention on {name} returned shape {tuple(out.shape)}; the hook's value has shape "
                         f"{tuple(x.shape)}")
    return out


def _broadcasts(shape: torch.Size, to: torch.Size) -> bool:
    """True when a tensor of `shape` broadcasts to `to` with no new axis."""
    try:
        return len(shape) == len(to) and torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def name_filter(names) -> Callable[[str], bool]:
    """A test on full hook names from `names`: None (nothing), a glob, a list of globs, or a filter itself."""
    if names is None:
        return lambda name: False
    if callable(names):
        return names
    if isinstance(names, str):
        names = [names]
    patterns = list(names)
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


@contextmanager
def capture(
    names=None, interventions: dict[str, Intervention] | None = None, records: bool = True, detach: bool = True,
    split_inputs: bool = False, patterns: bool = True,
) -> Iterator[Capture]:
    """Collect attention records (and hook tensors matching `names`, glob patterns) for the block.

    `interventions` maps a full hook name (e.g. "blocks.0.attn.hook_pattern") to f(tensor, name), which returns the
    new value (same shape) or None after changing the tensor in place.
    `split_inputs`: each head's q, k and v input and each MLP's input is a hook of its own (Attention.SPLIT_HOOKS,
    Block.SPLIT_HOOKS).
    `patterns` False: the records of an eager run keep q and k only, not the scores and pattern it computed (a 16-bit
    model's records are recomputed in float32 from them).
    """
    cap = Capture(names, interventions, records, detach, split_inputs, patterns)
    token = _ACTIVE.set(cap)
    try:
        yield cap
    finally:
        _ACTIVE.reset(token)


@contextmanager
def between_steps(fn: Callable[[int, int], None]) -> Iterator[None]:
    """Call `fn(done, total)` after each step of every forward pass this thread runs in the block: each block of a
    stack, and each row chunk of a long text's MLP and unembedding (a server gives its lock to waiting requests
    there, so one long forward pass never holds it for its whole length)."""
    token = _BETWEEN.set(fn)
    try:
        yield
    finally:
        _BETWEEN.reset(token)


def pausing() -> bool:
    """True inside between_steps: long work may split itself into steps (row chunks)."""
    return _BETWEEN.get() is not None


def step_done(done: int, total: int) -> None:
    """A forward pass finished step `done` of `total` (blocks of a stack, or row chunks of one long product): the
    between_steps function of this thread, if any."""
    fn = _BETWEEN.get()
    if fn is not None:
        fn(done, total)


def by_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, width: int, rows: int) -> torch.Tensor:
    """fn(x) for a row-wise fn of x [B, T, D] → [B, T, width]; inside between_steps, without gradients and for T >
    rows, `rows` rows at a time with step_done after each, filled into one output (no second [B, T, width] copy)."""
    if x.dim() != 3 or x.shape[1] <= rows or torch.is_grad_enabled() or not pausing():
        return fn(x)
    B, T, _ = x.shape
    out = x.new_empty(B, T, width)
    n = -(-T // rows)
    for i in range(n):
        part = slice(i * rows, min((i + 1) * rows, T))
        out[:, part] = fn(x[:, part])
        step_done(i + 1, n)
    return out


def intervene(interventions: dict[str, Intervention]):
    """Apply interventions for the block without keeping records."""
    return capture(interventions=interventions, records=False)


# -- ready-made interventions ----------------------------------------------------------------------
def head_index(name: str, x: torch.Tensor, head: int) -> tuple:
    """The index of head `head` in hook `name`'s value x (its HEAD_AXIS); one-line ValueError for a hook without a
    head axis or a head out of range."""
    axis = HEAD_AXIS.get(name.rsplit(".", 1)[-1])
    if axis is None:
        raise ValueError(f"{name} has no head axis; a head is chosen in "
                         f"{', '.join(sorted(HEAD_AXIS))}")
    if not -x.shape[axis] <= head < x.shape[axis]:
        raise ValueError(f"head {head} is out of range: {name} has {x.shape[axis]} heads (axis {axis})")
    return (slice(None),) * axis + (head,)


def zero_head(head: int) -> Intervention:
    """Zero one head of whichever hook it is given (on that hook's head axis, HEAD_AXIS)."""

    def fn(x: torch.Tensor, name: str) -> torch.Tensor:
        idx = head_index(name, x, head)
        x = x.clone()
        x[idx] = 0
        return x

    return fn


def replace_with(value: torch.Tensor, head: int | None = None) -> Intervention:
    """Replace the hook value (or one head of it, on the hook's head axis) with `value` — activation patching."""

    def fn(x: torch.Tensor, name: str) -> torch.Tensor:
        if head is None:
            if value.shape != x.shape:
                raise ValueError(f"patch for {name} has shape {tuple(value.shape)}, needs {tuple(x.shape)}")
            return value.to(x)
        idx = head_index(name, x, head)
        x = x.clone()
        try:
            x[idx] = value.to(x)
        except RuntimeError:
            raise ValueError(f"patch for head {head} of {name} has shape {tuple(value.shape)}, needs "
                             f"{tuple(x[idx].shape)}") from None
        return x

    return fn
