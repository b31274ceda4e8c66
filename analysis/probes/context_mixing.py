"""Context mixing: how much each token's representation takes from every other token, layer by layer — measured on
what attention moves, not on its weights. A model with one self-attention stack (decoder, encoder, ViT) gets one
[L, T, T] array; an encoder–decoder an EncDecMixing of its encoder's, decoder's and cross-attention's matrices
(analysis.probes.encdec_mixing, the same two measures).

For layer l of a model with one self-attention stack, query token i and key token j:
  attention_norm  N_l[i, j] = ‖Σ_h α_h[i, j] · v_h(x_j) W_O^h‖         (Kobayashi et al. 2020, "Attention is not only
      a weight"): the length of the vector token j adds to token i's attention output. v_h(x_j) is head h's value of
      token j as the model computes it (its k/v head under grouped-query attention), W_O^h head h's columns of the
      output projection; the output bias, the same for every j, is left out. Exact, from the Gram matrix of each
      token's per-head outputs: N² = Σ_h Σ_g α_h α_g ⟨v_h W_O^h, v_g W_O^g⟩.
  value_zeroing   Z_l[i, j] = 1 − cos(y_i, y_i^¬j), each row divided by its sum (a zero row stays zero)
      (Mohebbi et al. 2023, "Quantifying Context Mixing in Transformers"): y_i is block l's output at i, y^¬j the same
      block run from the same input with token j's value vector zeroed in every head. Each layer alone, from the
      clean run's stream (as Inseq's ValueZeroing). T + 1 runs of one block per layer, the clean one in the same
      batch: a key that cannot change y_i (a later token under a causal mask) leaves it equal bit for bit, and 0.
A token's score for query i is the last layer's row, N_L[i] or Z_L[i] (Inseq's default for value zeroing, "single":
the last layer), as the faithfulness benchmark's last-layer attention reads A_L[i]. Rolled out over the layers as
attention is, value zeroing sends nearly all of a row to the first token on the lecture models (its diagonal holds
only a token's own value, not the residual stream): top-1 0.0 on lecture-decoder's held-out sources against 0.975
for the last layer alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from attnlab.analysis.attention.rollout import rownorm
from attnlab.analysis.probes import encdec_mixing
from attnlab.analysis.probes.encdec_mixing import EncDecMixing
from attnlab.analysis.probes.mixing_parts import site_norms, zeroed_distances
from attnlab.analysis.probes.pass_size import IG_MAX_FLOPS, rows_per_pass
from attnlab.model.inputs import InputError
from attnlab.model.readout import Readout

METHODS = ("attention_norm", "value_zeroing")
Mixing = np.ndarray | EncDecMixing  # [L, T, T] for one stack; an encoder–decoder's three attentions


def refusal(lm, t: int | None = None, s: int | None = None) -> str | None:
    """Why context mixing does not apply to this model (or value zeroing to `t` tokens; an encoder–decoder: `t`
    target and `s` source tokens), in one line; None when it does."""
    caps = lm.capabilities
    if not (caps.internals and caps.interventions):
        return f"{lm.name} is read as it is, without hooks on its values: context mixing needs a converted model"
    if t is None:
        return None
    if lm.reads_source:
        if s is None:
            raise ValueError("an encoder–decoder's value zeroing costs by its source too: pass s")
        if (flops := zeroing_flops(lm, t, s)) > IG_MAX_FLOPS:
            return (f"value zeroing reruns every block once per token: {s} source and {t} target tokens would take "
                    f"{flops / 1e12:.1f} TFLOP (at most {IG_MAX_FLOPS / 1e12:.0f}); shorten the source or the target")
        return None
    if (flops := zeroing_flops(lm, t)) > IG_MAX_FLOPS:
        return (f"value zeroing reruns every block once per token: {t} tokens would take {flops / 1e12:.1f} TFLOP "
                f"(at most {IG_MAX_FLOPS / 1e12:.0f}); at most {max_zeroing_tokens(lm)} tokens")
    return None


def zeroing_flops(lm, t: int | np.ndarray, s: int | np.ndarray | None = None) -> float | np.ndarray:
    """Multiply–adds ×2 of value zeroing over t tokens: every block run by t + 1 rows of t tokens (its weights once
    per token, the scores and the weighted sum of values 4·t·d_attn per token); an encoder–decoder's over s source
    and t target tokens: encdec_mixing.zeroing_flops."""
    if lm.reads_source:
        return encdec_mixing.zeroing_flops(lm, t, s)
    blocks = lm.model.blocks
    weights = sum(p.numel() for p in blocks.parameters())
    return (t + 1) * t * (2.0 * weights + 4.0 * len(blocks) * t * lm.cfg.d_attn)


def max_zeroing_tokens(lm) -> int:
    """The most tokens value zeroing takes within IG_MAX_FLOPS (the cost grows with t: the last t that fits); one
    self-attention stack."""
    t = np.arange(1, lm.context + 1)
    return int(t[zeroing_flops(lm, t) <= IG_MAX_FLOPS].max(initial=1))


def _check(lm, inputs, zeroing: bool = False) -> None:
    """InputError in one line when context mixing (`zeroing`: value zeroing, its cost too) does not apply."""
    s = inputs.src_ids.shape[1] if lm.reads_source and inputs.src_ids is not None else None
    why = refusal(lm, inputs.ids.shape[1] if zeroing else None, s)
    if why is not None:
        raise InputError(why)
    if inputs.ids.shape[0] != 1:
        raise InputError(f"context mixing reads one input at a time, got a batch of {inputs.ids.shape[0]}")


@torch.no_grad()
def attention_norms(lm, inputs, interventions: dict | None = None) -> Mixing:
    """N [L, T, T] (module docstring), float64, of the run under `interventions` ({hook name: fn}). Each layer's
    norms are taken inside the forward, from its values and pattern (after any intervention on them), so one
    layer's pattern is held at a time. An encoder–decoder: EncDecMixing."""
    _check(lm, inputs)
    if lm.reads_source:
        return encdec_mixing.attention_norms(lm, inputs, interventions)
    sites = [b.attn for b in lm.model.blocks]
    out = site_norms(lm, inputs, sites, interventions)
    return np.stack([out[m.site] for m in sites])  # [L, T, T]


@torch.no_grad()
def value_zeroing(lm, inputs, interventions: dict | None = None,
                  on_step: Callable[[int, int], None] | None = None) -> Mixing:
    """Z [L, T, T] (module docstring), float64, each row summing to 1 (or 0), of the run under `interventions`
    ({hook name: fn}; one on a value acts before the zeroing). on_step(done, total) after each block's runs. An
    encoder–decoder: EncDecMixing."""
    _check(lm, inputs, zeroing=True)
    if lm.reads_source:
        return encdec_mixing.value_zeroing(lm, inputs, interventions, on_step)
    stack = lm.model
    blocks = stack.blocks
    cap = lm.forward(inputs, names=[f"{b.site}.hook_resid_pre" for b in blocks], interventions=interventions,
                     records=False).capture
    ro = Readout(stack, None)
    x0 = cap.tensor(f"{blocks[0].site}.hook_resid_pre")  # [1, T, D]
    T = x0.shape[1]
    ctx = ro.contexts(T, "eager", device=x0.device)
    per = max(1, rows_per_pass(lm, T, grad=False) - 1)  # zeroed rows per batch, beside the clean one
    z = np.zeros((len(blocks), T, T))
    for layer, b in enumerate(blocks):
        x = cap.tensor(f"{b.site}.hook_resid_pre")  # [1, T, D]

        def run(n, iv, layer=layer, x=x):  # [n, T, D]
            return ro.run_from(layer, x.expand(n, -1, -1), layer + 1, contexts=ctx, interventions=iv)

        z[layer] = zeroed_distances(run, b.attn.site, T, per, interventions)
        if on_step is not None:
            on_step(layer + 1, len(blocks))
    return rownorm(np.clip(z, 0.0, None))


def of_text(lm, text: str, src: str | None, method: str, on_step: Callable[[int, int], None] | None = None
            ) -> Mixing:
    """context_mixing of `text` (and a source text `src`: an encoder–decoder's) as the model reads it;
    on_step(done, total) after each layer of value zeroing (a job's slices)."""
    return context_mixing(lm, lm.encode(text, src), method, on_step=on_step)


def context_mixing(lm, inputs, method: str, interventions: dict | None = None,
                   on_step: Callable[[int, int], None] | None = None) -> Mixing:
    """The layers' matrices [L, T, T] of one of METHODS, or an encoder–decoder's EncDecMixing (the app's cached
    entry point)."""
    if method == "attention_norm":
        return attention_norms(lm, inputs, interventions)
    if method == "value_zeroing":
        return value_zeroing(lm, inputs, interventions, on_step)
    raise ValueError(f"unknown context-mixing method {method!r}; choose from {', '.join(METHODS)}")
