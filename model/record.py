"""AttentionRecord: a picklable record of one attention site in one forward pass, read as numpy (torch-free once read).

A record from the eager backend holds the materialised scores and pattern; a record from a fused
backend holds q and k (and the positional bias) and recomputes any head or window exactly on demand.
Scores here are "raw scaled scores": scale·q·kᵀ (soft-capped when the model caps them: cap·tanh(·/cap))
+ bias, before masking; `score_steps` gives each step. The mask is separate.

Grouped-query attention: the record keeps one pattern per QUERY head (`pattern()` is [n_heads, q, k])
but k per K/V head, as the cache holds it ([batch, n_kv_heads, k, d]); query head h met k/v head
`kv_head(h)` = h // (n_heads // n_kv_heads). Read keys per query head with `keys()`, not `k[...]`.

q, k, mask, bias and an eager run's scores and pattern are read as numpy but may be given as tensors (on a GPU, in bfloat16) or as a `CausalMask`:
they become numpy on first read and are kept (`OnHost`), so a capture copies nothing off the device and
builds no T × T mask during the forward. Pickling converts them first.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from attnlab.model.softmax import masked_softmax

Window = tuple[int, int, int, int]  # (q_start, q_stop, k_start, k_stop), absolute-free row/col indices
_REQUIRED = object()


class CausalMask:
    """The plain causal mask of n queries over the same n keys (query i sees keys 0..i), made whole only when
    read whole; shared by every layer of one forward."""

    def __init__(self, n: int):
        self.n, self._full = n, None

    def window(self, q0: int, q1: int, k0: int, k1: int) -> np.ndarray:
        """bool [q1 − q0, k1 − k0] without the whole mask."""
        return np.arange(q0, q1)[:, None] >= np.arange(k0, k1)[None, :]

    def materialize(self) -> np.ndarray:
        if self._full is None:
            self._full = np.tri(self.n, dtype=bool)[None]  # [1, q, k]
        return self._full


class HostCopy:
    """A tensor copied to numpy on first read, once however many records share it (a forward's padding mask)."""

    def __init__(self, tensor):
        self.tensor, self._array = tensor, None

    def materialize(self) -> np.ndarray:
        if self._array is None:
            self._array, self.tensor = to_host(self.tensor), None
        return self._array


def to_host(value) -> np.ndarray:
    """numpy of a CausalMask / HostCopy, or of a torch tensor (floating point as float32)."""
    if hasattr(value, "materialize"):
        return value.materialize()
    t = value.detach()
    return (t.float() if t.is_floating_point() else t).cpu().numpy()


class OnHost:
    """A record field read as numpy and given as numpy, a tensor or a deferred mask: converted on first read."""

    def __init__(self, default=_REQUIRED):
        self.default = default

    def __set_name__(self, owner, name: str):
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:  # the dataclass asks for the default: none for a required field
            if self.default is _REQUIRED:
                raise AttributeError(self.slot[1:])
            return self.default
        value = obj.__dict__[self.slot]
        if value is not None and not isinstance(value, np.ndarray):
            value = obj.__dict__[self.slot] = to_host(value)
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.slot] = value


class PicklesOnHost:
    """A dataclass of OnHost fields pickled as numpy (every field read first): torch-free when unpickled."""

    def __getstate__(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)


@dataclass
class AttentionRecord(PicklesOnHost):
    site: str  # hook prefix, e.g. "blocks.0.attn" or "decoder.blocks.1.cross_attn"
    stack: str  # "decoder", "encoder" (or "" for a plain decoder/encoder model: see `name`)
    layer: int
    attn_type: str  # "self" | "cross"
    backend: str  # eager | sdpa | flash
    kernel: str  # the kernel that actually ran
    scale: float  # the 1/√d_k factor applied to q·kᵀ
    q_offset: int  # absolute position of the first query row
    q: np.ndarray = OnHost()  # float32 [batch, head, q, d_head] (after QK-norm and RoPE: exactly what met k)
    k: np.ndarray = OnHost()  # float32 [batch, kv_head, k, d_head]: one per k/v head (= head unless GQA/MQA)
    mask: np.ndarray | None = OnHost()  # bool [batch|1, q, k], True = may attend; None = all visible
    bias: np.ndarray | None = OnHost(None)  # float32 [head, q, k] positional bias (ALiBi) or None
    scores_full: np.ndarray | None = OnHost(None)  # float32 [batch, head, q, k] (only when an intervention changed them)
    pattern_full: np.ndarray | None = OnHost(None)  # float32 [batch, head, q, k] (eager only)
    softcap: float | None = None  # Gemma 2: scaled scores → softcap·tanh(scores/softcap), before the bias

    # -- shape -----------------------------------------------------------------------------------
    @property
    def n_heads(self) -> int:
        return self.q.shape[1]

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads: n_heads (multi-head), fewer (grouped-query) or 1 (multi-query)."""
        return self.k.shape[1]

    @property
    def kv_group(self) -> int:
        """Query heads per k/v head: 1 (multi-head), more under grouped-query attention, n_heads (multi-query)."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The k/v head that query head `head` shares."""
        return self._heads(head)[0] // self.kv_group

    @property
    def q_len(self) -> int:
        return self.q.shape[2]

    @property
    def k_len(self) -> int:
        return self.k.shape[2]

    @property
    def has_mask(self) -> bool:
        """False when every key is visible (mask None), told without building a deferred mask."""
        return self.__dict__["_mask"] is not None

    @property
    def causal(self) -> bool:
        """True when the mask is known to be the plain square causal one (a fused causal forward's)."""
        return isinstance(self.__dict__["_mask"], CausalMask)

    @property
    def stored_cells(self) -> int:
        """Cells of the stored pattern (0 for a lazy record), told without copying it off its device."""
        p = self.__dict__["_pattern_full"]
        return 0 if p is None else int(np.prod(p.shape))

    @property
    def lazy(self) -> bool:
        """True when patterns are recomputed from q and k (a fused run); copies nothing to the host."""
        return self.__dict__["_pattern_full"] is None

    # -- accessors -------------------------------------------------------------------------------
    def mask_for(self, batch: int = 0, window: Window | None = None) -> np.ndarray:
        """Bool [q, k] (or the window), True = may attend."""
        q0, q1, k0, k1 = self._window(window)
        if self.causal:
            return self.__dict__["_mask"].window(q0, q1, k0, k1)
        if self.mask is None:
            return np.ones((q1 - q0, k1 - k0), dtype=bool)
        m = self.mask[min(batch, self.mask.shape[0] - 1)]
        return m[q0:q1, k0:k1]

    def raw_qk(self, head: int | None = None, window: Window | None = None, batch: int = 0) -> np.ndarray:
        """q·kᵀ without scale or bias: [H, q, k] or [q, k]."""
        q0, q1, k0, k1 = self._window(window)
        heads = self._heads(head)
        q = self.q[batch, heads, q0:q1]  # [h, q, d]
        k = self.keys(heads, batch, k0, k1)  # [h, k, d]
        out = np.matmul(q, k.transpose(0, 2, 1))  # [h, q, k]
        return out[0] if head is not None else out

    def keys(self, heads=None, batch: int = 0, k0: int = 0, k1: int | None = None) -> np.ndarray:
        """The keys each query head in `heads` (list, int or None = all) met: float32 [h, k, d]."""
        hs = self._heads(heads) if heads is None or isinstance(heads, (int, np.integer)) else list(heads)
        group = self.n_heads // self.n_kv_heads
        return self.k[batch, [h // group for h in hs], k0:k1]  # [h, k, d]

    def score_steps(self, head: int | None = None, window: Window | None = None, batch: int = 0) -> list:
        """[(step, scores)] from q·kᵀ to the pre-softmax score, each step's [H, q, k] or [q, k] (unmasked):
        q·kᵀ, × scale, soft-cap (when the model caps), + bias (when there is one); the last is `scores`."""
        s = self.raw_qk(head, window, batch)
        steps = [("q·kᵀ", s), (f"× scale ({self.scale:.4g})", s := s * np.float32(self.scale))]
        if self.softcap is not None:
            cap = np.float32(self.softcap)
            steps.append((f"soft-cap {self.softcap:g}·tanh(·/{self.softcap:g})", s := np.tanh(s / cap) * cap))
        if self.bias is not None:
            q0, q1, k0, k1 = self._window(window)
            b = self.bias[self._heads(head), q0:q1, k0:k1]
            steps.append(("+ positional bias", s + (b[0] if head is not None else b)))
        return steps

    def scores(self, head: int | None = None, window: Window | None = None, batch: int = 0) -> np.ndarray:
        """Raw scaled scores scale·q·kᵀ (soft-capped) + bias, unmasked: [H, q, k] or [q, k]."""
        q0, q1, k0, k1 = self._window(window)
        heads = self._heads(head)
        if self.scores_full is not None:
            out = self.scores_full[batch, heads, q0:q1, k0:k1]
        else:
            qk = self.raw_qk(head, window, batch).reshape(len(heads), q1 - q0, k1 - k0)  # only the heads asked for
            out = qk * np.float32(self.scale)
            if self.softcap is not None:
                out = np.tanh(out / np.float32(self.softcap)) * np.float32(self.softcap)
            if self.bias is not None:
                out = out + self.bias[heads, q0:q1, k0:k1]
        return out[0] if head is not None else out

    def pattern(self, head: int | None = None, window: Window | None = None, batch: int = 0) -> np.ndarray:
        """Softmax weights [H, q, k] or [q, k]; masked entries exactly 0, a fully masked row all 0."""
        q0, q1, k0, k1 = self._window(window)
        heads = self._heads(head)
        if self.pattern_full is not None:
            out = self.pattern_full[batch, heads, q0:q1, k0:k1]
        else:
            # The softmax needs whole rows: compute rows q0:q1 over every key, then cut the window.
            s = self.scores(head, (q0, q1, 0, self.k_len), batch).reshape(len(heads), q1 - q0, self.k_len)
            m = self.mask_for(batch, (q0, q1, 0, self.k_len))  # [q, K]
            out = masked_softmax(s, m)[:, :, k0:k1]
        return out[0] if head is not None else out

    def masked_scores(self, head: int | None = None, window: Window | None = None, batch: int = 0) -> np.ndarray:
        """Scores with −inf where the mask forbids attention (what the softmax sees)."""
        s = self.scores(head, window, batch)
        return np.where(self.mask_for(batch, window), s, -np.inf).astype(np.float32)

    def _heads(self, head: int | None) -> list[int]:
        if head is None:
            return list(range(self.n_heads))
        if not 0 <= head < self.n_heads:
            raise IndexError(f"head {head} out of range 0..{self.n_heads - 1}")
        return [head]

    def _window(self, window: Window | None) -> Window:
        if window is None:
            return (0, self.q_len, 0, self.k_len)
        q0, q1, k0, k1 = window
        if not (0 <= q0 < q1 <= self.q_len and 0 <= k0 < k1 <= self.k_len):
            raise IndexError(f"window {window} outside [0,{self.q_len})×[0,{self.k_len})")
        return (q0, q1, k0, k1)
