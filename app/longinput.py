"""Long inputs (up to a model's context, e.g. 4,096 tokens): one fused capture, a pooled overview of one
head, and any window of it at full resolution with the pattern's exact values.

The capture runs the fused backend (sdpa) with hooks on, so every self-attention site keeps q and k
(O(T·d) per head) and never the [H, T, T] pattern; `head_overview` and `head_window` recompute the rows
they need from q and k (analysis.attention.long_records). Nothing here depends on which model ran: the page reads the
context from the model's config, so a local checkpoint folder with a long context goes the same way.

Pure functions of a loaded model or its CapturedRun; the cached entry points keyed by model name and
text (`state.long_capture`, `state.long_overview`) live in app/state.py with the other caches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from attnlab.analysis.attention.long_records import exact_window
from attnlab.analysis.attention.long_records import overview as pooled_overview
from attnlab.model.budget import plan
from attnlab.model.captured import CapturedRun
from attnlab.model.record import AttentionRecord

BACKEND = "sdpa"  # the fused kernel; a capture keeps q and k only
OVERVIEW_CELLS = 512  # the overview is pooled to at most this many cells per side
# Window sides: a 256×256 window of exact float32 weights is 0.35 MB of Plotly JSON; with the 512×512
# overview (1.4 MB) the page stays under its 2 MB budget. A 512×512 window would add 1.4 MB.
WINDOW_SIZES = (16, 32, 64, 128, 256)
MAX_WINDOW = WINDOW_SIZES[-1]
SAMPLE_TOKENS = 4000  # the long sample's length, when the model's context allows it


@dataclass
class Overview:
    pooled: np.ndarray  # float32 [nq, nk]; NaN where every cell of a block is masked
    q_edges: np.ndarray  # int [nq + 1]: block i covers query rows q_edges[i] .. q_edges[i+1] − 1
    k_edges: np.ndarray  # int [nk + 1]
    how: str  # "max" or "mean"
    ms: float

    @property
    def block(self) -> tuple[int, int]:
        """Rows × columns per pooled cell."""
        return int(self.q_edges[1] - self.q_edges[0]), int(self.k_edges[1] - self.k_edges[0])


@dataclass
class Window:
    values: np.ndarray  # float32 [q1 − q0, k1 − k0]: the pattern's exact weights (masked cells 0)
    mask: np.ndarray  # bool, same shape, True = may attend
    q0: int
    q1: int
    k0: int
    k1: int
    ms: float


# -- pure ------------------------------------------------------------------------------------------------
def run_capture(lm, text: str, backend: str = BACKEND) -> CapturedRun:
    """Tokenize and run `text` once with capture (the caller holds the inference lock). Raises InputError
    for an empty text, one longer than the model's context, or one whose run passes the memory budget."""
    inputs = lm.encode_reading(text)
    n = max(inputs.ids.shape[1], 0 if inputs.src_ids is None else inputs.src_ids.shape[1])
    plan(lm.name, lm.cfg, n, dtype=lm.dtype, backend=backend, reads="pooled", context=lm.context, device=lm.device,
         where="on the Long inputs page on this server")
    return lm.run(inputs=inputs, backend=backend, top_k=0)


def text_records(cap: CapturedRun) -> list[AttentionRecord]:
    """One lazy record per layer of the self-attention that reads the text (the encoder's for a source)."""
    return cap.layer_records(cap.text_group)


def _record(cap: CapturedRun, layer: int, head: int) -> AttentionRecord:
    records = text_records(cap)
    if not 0 <= layer < len(records):
        raise IndexError(f"layer {layer} is outside 0..{len(records) - 1}")
    if not 0 <= head < cap.n_heads:
        raise IndexError(f"head {head} is outside 0..{cap.n_heads - 1}")
    return records[layer]


def head_overview(cap: CapturedRun, layer: int, head: int, max_cells: int = OVERVIEW_CELLS,
                  how: str = "max") -> Overview:
    """One head's pattern pooled to at most max_cells × max_cells (masked cells ignored)."""
    rec = _record(cap, layer, head)
    t0 = time.perf_counter()
    pooled, qe, ke = pooled_overview(rec, head, max_cells, how)
    return Overview(pooled, qe, ke, how, (time.perf_counter() - t0) * 1e3)


def clamp_window(n_tokens: int, q0: int, k0: int, size: int) -> tuple[int, int, int, int]:
    """(q0, q1, k0, k1) of a size × size window moved inside [0, n_tokens), as large as the text allows."""
    if not 1 <= size <= MAX_WINDOW:
        raise ValueError(f"the window size must be 1 to {MAX_WINDOW}, not {size}")
    side = min(size, n_tokens)
    q0 = min(max(int(q0), 0), n_tokens - side)
    k0 = min(max(int(k0), 0), n_tokens - side)
    return q0, q0 + side, k0, k0 + side


def head_window(cap: CapturedRun, layer: int, head: int, q0: int, k0: int, size: int) -> Window:
    """The size × size window of one head starting at query row q0 and key column k0 (moved inside the
    text if it runs over the end), at full resolution: exact weights, softmax over the whole row."""
    rec = _record(cap, layer, head)
    q0, q1, k0, k1 = clamp_window(len(cap.text_tokens), q0, k0, size)
    t0 = time.perf_counter()
    values, mask = exact_window(rec, head, q0, q1, k0, k1)
    return Window(values, mask, q0, q1, k0, k1, (time.perf_counter() - t0) * 1e3)


def long_sample(n_chars: int = SAMPLE_TOKENS, period: int | None = None, seed: int = 0) -> str:
    """A random 'text' of lower-case nonsense words, repeated every `period` characters (default n_chars / 8)
    and cut to n_chars. With a byte tokenizer a character is a token; with a subword tokenizer a token
    holds one character or more, so the text never has more tokens than characters (plus the specials).
    The repeats are what an induction head keys on: each copy can attend to the one before."""
    if n_chars < 1:
        raise ValueError(f"n_chars must be ≥ 1, got {n_chars}")
    period = max(16, n_chars // 8) if period is None else max(1, int(period))
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words, length = [], 0
    while length < period:
        w = "".join(rng.choice(letters, int(rng.integers(2, 8))))
        words.append(w)
        length += len(w) + 1
    segment = (" ".join(words) + " ")[:period]  # exactly `period` characters
    return (segment * (n_chars // period + 1))[:n_chars].rstrip()


def sample_chars(context: int) -> int:
    """How many characters the long sample gets for a model: SAMPLE_TOKENS, less room for special tokens."""
    return max(1, min(SAMPLE_TOKENS, context - 8))
