"""The StreamingLLM test: perplexity of a long text under a sliding window of W keys, with and without the first
`sinks` tokens kept, next to full attention (model.streaming builds the masks and the cache positions).

Perplexity is exp of the mean negative log-likelihood of tokens 1..T−1, each predicted from the tokens before it
(every prediction counts, those made before the window fills too: there all runs agree). `after_window` gives
the same over the predictions whose window has slid (query positions ≥ sinks + window), where the runs differ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from attnlab.analysis.probes.sinks import sink_data, sink_texts
from attnlab.model.inputs import InputError
from attnlab.model.streaming import cache_position_interventions, can_move_sinks, window_mask

WINDOW = 256
SINKS = 4


@dataclass(frozen=True)
class WindowPPL:
    window: int
    sinks: int
    tokens: int
    full: float
    with_sinks: float  # sinks at their original positions (one masked forward)
    without_sinks: float
    with_sinks_cache_positions: float | None  # sinks at StreamingLLM's cache slots (RoPE models), else None
    after_window: dict  # the same four over the predictions at query positions ≥ sinks + window

    def to_json(self) -> dict:
        return asdict(self)


def default_window(lm) -> int:
    """WINDOW tokens, or a quarter of the model's context when that is less (lecture-decoder: 96 // 4 = 24)."""
    return max(1, min(WINDOW, lm.context // 4))


def window_text(lm) -> str:
    """The window test's text, cut to the model's context: sinks.json's long essay; a bundled lecture model (whose
    vocabulary is the lecture's) reads its samples one after another instead."""
    lecture = lm.name.startswith("lecture-")
    return lm.first_tokens(" ".join(sink_texts(lm)) if lecture else sink_data()["long"]["text"])


def window_test_lacks(lm) -> str | None:
    """One line saying why `lm` cannot run the window test, or None when it can."""
    can = lm.capabilities
    if not can.next_token:
        return f"{lm.name} does not predict the next token (a decoder does): no perplexity to compare"
    if not can.masks:
        return f"{lm.name} runs as a transformers view: it takes no mask other than its own (the window test needs a converted family)"
    return None


def token_nll(lm, inputs, mask=None, interventions=None, backend: str = "sdpa") -> torch.Tensor:
    """[T − 1] float64 (computed in float32): −log p(token t+1 | tokens ≤ t) under `mask` (a MaskSpec; None: the model's own)."""
    fwd = lm.forward(inputs, backend="eager" if interventions else backend, mask=mask, interventions=interventions,
                     records=False)
    logits = fwd.logits[0, :-1].float()  # [T − 1, V]
    return F.cross_entropy(logits, inputs.ids[0, 1:].to(logits.device), reduction="none").double()  # [T − 1]


def window_perplexity(lm, text: str, window: int = WINDOW, sinks: int = SINKS, backend: str = "sdpa") -> WindowPPL:
    """Full, window + sinks, window alone (and window + sinks at cache positions on a RoPE model) over `text`."""
    why = window_test_lacks(lm)
    if why:
        raise InputError(why)
    if window < 1 or sinks < 0:
        raise InputError(f"the window must be ≥ 1 token and sinks ≥ 0 (got window {window}, sinks {sinks})")
    inp = lm.encode(text)
    T = inp.ids.shape[1]
    if T <= sinks + window + 1:
        raise InputError(f"the text is {T} tokens long; the window test needs more than window + sinks + 1 = "
                         f"{window + sinks + 1} tokens (a shorter --window, or a longer text)")
    nll = {"full": token_nll(lm, inp, None, backend=backend),
           "with_sinks": token_nll(lm, inp, window_mask(window, sinks), backend=backend),
           "without_sinks": token_nll(lm, inp, window_mask(window), backend=backend),
           "with_sinks_cache_positions": None}
    if can_move_sinks(lm.cfg) and sinks:
        sites = [n.rsplit(".", 1)[0] for n in lm.model.hook_names() if n.endswith(".attn.hook_attn_scores")]
        fns = cache_position_interventions(lm.cfg, sites, window, sinks)
        nll["with_sinks_cache_positions"] = token_nll(lm, inp, window_mask(window, sinks), fns)
    first = sinks + window  # prediction t is made at query position t: from here on the window has slid
    ppl = {k: None if v is None else math.exp(float(v.mean())) for k, v in nll.items()}
    late = {k: None if v is None else math.exp(float(v[first:].mean())) for k, v in nll.items()}
    return WindowPPL(window, sinks, T, ppl["full"], ppl["with_sinks"], ppl["without_sinks"],
                     ppl["with_sinks_cache_positions"], late)


def window_test(lm, window: int | None = None) -> WindowPPL:
    """The window test on the model's own text (`window_text`), W = `window` or `default_window`."""
    why = window_test_lacks(lm)
    if why:  # before window_text: a vision model has no tokenizer to cut the text with
        raise InputError(why)
    return window_perplexity(lm, window_text(lm), window or default_window(lm))
