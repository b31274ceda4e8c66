"""Context mixing: how much each token's representation takes from every other token, layer by layer — measured on
what attention moves, not on its weights.

For layer l of a model with one self-attention stack (decoder, encoder, ViT), query token i and key token j:
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
import torch.nn.functional as F
from attnlab.analysis.attention.rollout import rownorm
from attnlab.analysis.probes.pass_size import IG_MAX_FLOPS, give_back, rows_per_pass
from attnlab.model.inputs import InputError
from attnlab.model.readout import Readout

METHODS = ("attention_norm", "value_zeroing")


def refusal(lm, t: int | None = None) -> str | None:
    """Why context mixing does not apply to this model (or value zeroing to `t` tokens), in one line; None when it
    does."""
    caps = lm.capabilities
    if not (caps.internals and caps.interventions):
        return f"{lm.name} is read as it is, without hooks on its values: context mixing needs a converted model"
    if lm.reads_source:
        return (f"{lm.name} is an encoder–decoder; context mixing is measured here on one self-attention stack "
                "(a decoder, an encoder or a vision transformer)")
    if t is not None and (flops := zeroing_flops(lm, t)) > IG_MAX_FLOPS:
        return (f"value zeroing reruns every block once per token: {t} tokens would take {flops / 1e12:.1f} TFLOP "
                f"(at most {IG_MAX_FLOPS / 1e12:.0f}); at most {max_zeroing_tokens(lm)} tokens")
    return None


def zeroing_flops(lm, t: int | np.ndarray) -> float | np.ndarray:
    """Multiply–adds ×2 of value zeroing over t tokens: every block run by t + 1 rows of t tokens (its weights once
    per token, the scores and the weighted sum of values 4·t·d_attn per token)."""
    blocks = lm.model.blocks
    weights = sum(p.numel() for p in blocks.parameters())
    return (t + 1) * t * (2.0 * weights + 4.0 * len(blocks) * t * lm.cfg.d_attn)


def max_zeroing_tokens(lm) -> int:
    """The most tokens value zeroing takes within IG_MAX_FLOPS (the cost grows with t: the last t that fits)."""
    t = np.arange(1, lm.context + 1)
    return int(t[zeroing_flops(lm, t) <= IG_MAX_FLOPS].max(initial=1))


def _one_stack(lm, inputs, zeroing: bool = False) -> tuple[torch.nn.Module, list]:
    """The stack and its self-attention modules, or InputError in one line (`zeroing`: value zeroing's cost too)."""
    why = refusal(lm, inputs.ids.shape[1] if zeroing else None)
    if why is not None:
        raise InputError(why)
    if inputs.ids.shape[0] != 1:
        raise InputError(f"context mixing reads one input at a time, got a batch of {inputs.ids.shape[0]}")
    stack = lm.model
    return stack, [b.attn for b in stack.blocks]


@torch.no_grad()
def attention_norms(lm, inputs, interventions: dict | None = None) -> np.ndarray:
    """N [L, T, T] (module docstring), float64, of the run under `interventions` ({hook name: fn}). Each layer's
    norms are taken inside the forward, from its values and pattern (after any intervention on them), so one
    layer's pattern is held at a time."""
    stack, sites = _one_stack(lm, inputs)
    given, values, out = dict(interventions or {}), {}, {}
    reads = {}
    for m in sites:
        def keep_v(v, name, m=m):  # [1, T, Hkv, d]
            values[m.site] = v[0].double()

        def read_pattern(a, name, m=m):  # [1, H, T, T]
            out[m.site] = _layer_norms(m, values.pop(m.site), a[0].double())

        reads[f"{m.site}.hook_v"], reads[f"{m.site}.hook_pattern"] = keep_v, read_pattern
    lm.forward(inputs, interventions={n: _then(given.get(n), fn) for n, fn in reads.items()} | {
        n: fn for n, fn in given.items() if n not in reads}, records=False)
    return np.stack([out[m.site] for m in sites])  # [L, T, T]


def _layer_norms(m, v: torch.Tensor, a: torch.Tensor) -> np.ndarray:
    """‖Σ_h α_h[i, j] v_h(x_j) W_O^h‖ [T, T] of attention module m from its values v [T, Hkv, d] and pattern a
    [H, T, T] (float64)."""
    v = v.repeat_interleave(m.group, dim=1)  # [T, Hkv, d] -> [T, H, d]: query head h reads k/v head h // group
    w = m.out.weight.double().view(-1, m.n_heads, m.d_head)  # [D, H·d] -> [D, H, d]
    fv = torch.einsum("jhd,ehd->jhe", v, w)  # [T, H, D]: what each head writes for each token's value
    gram = torch.einsum("jhe,jge->jhg", fv, fv)  # [T, H, H]
    per_key = a.permute(2, 1, 0)  # [H, i, j] -> [j, i, H]: each key's weights from every query
    n2 = (torch.bmm(per_key, gram) * per_key).sum(-1)  # [j, i]: Σ_h Σ_g α_h ⟨f_h, f_g⟩ α_g, one matmul per key
    return n2.T.clamp_min(0).sqrt().cpu().numpy()  # [i, j]


def _then(first, read):
    """An intervention that applies `first` (None: none), then reads the result with `read` (which returns None)."""
    if first is None:
        return lambda x, name: read(x, name)

    def both(x, name):
        out = first(x, name)
        x = x if out is None else out
        read(x, name)
        return x

    return both


@torch.no_grad()
def value_zeroing(lm, inputs, interventions: dict | None = None,
                  on_step: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Z [L, T, T] (module docstring), float64, each row summing to 1 (or 0), of the run under `interventions`
    ({hook name: fn}; one on a value acts before the zeroing). on_step(done, total) after each block's runs."""
    stack, sites = _one_stack(lm, inputs, zeroing=True)
    blocks = stack.blocks
    cap = lm.forward(inputs, names=[f"{b.site}.hook_resid_pre" for b in blocks], interventions=interventions,
                     records=False).capture
    given = dict(interventions or {})
    ro = Readout(stack, None)
    x0 = cap.tensor(f"{blocks[0].site}.hook_resid_pre")  # [1, T, D]
    T = x0.shape[1]
    ctx = ro.contexts(T, "eager", device=x0.device)
    per = max(1, rows_per_pass(lm, T, grad=False) - 1)  # zeroed rows per batch, beside the clean one
    chunks = [list(range(i, min(i + per, T))) for i in range(0, T, per)]
    z = np.zeros((len(blocks), T, T))
    for layer, (b, m) in enumerate(zip(blocks, sites)):
        x = cap.tensor(f"{b.site}.hook_resid_pre")  # [1, T, D]
        first = given.get(f"{m.site}.hook_v")
        for js in chunks:
            def zero(v, name, js=js, first=first):
                v = v.clone() if first is None else _applied(first, v, name)  # [1 + n, T, Hkv, d]
                v[torch.arange(1, len(js) + 1), torch.tensor(js)] = 0  # row 1 + r: token js[r]'s value zeroed
                return v

            y = ro.run_from(layer, x.expand(1 + len(js), -1, -1), layer + 1, contexts=ctx,
                            interventions={**given, f"{m.site}.hook_v": zero})  # [1 + n, T, D]
            d = 1 - F.cosine_similarity(y[1:].double(), y[:1].double(), dim=-1)  # [n, T]: row r, query i
            d[(y[1:] == y[:1]).all(-1)] = 0  # y_i untouched (a key i cannot see): 0, not the cosine's rounding
            z[layer][:, js] = d.T.cpu().numpy()  # [n, T] -> [T, n]: column j of every query row
            give_back()
        if on_step is not None:
            on_step(layer + 1, len(blocks))
    return rownorm(np.clip(z, 0.0, None))


def _applied(fn, v: torch.Tensor, name: str) -> torch.Tensor:
    """A copy of v after an intervention fn (which may change its argument in place and return None)."""
    v = v.clone()
    out = fn(v, name)
    return (v if out is None else out).clone()


def of_text(lm, text: str, src: str | None, method: str, on_step: Callable[[int, int], None] | None = None
            ) -> np.ndarray:
    """context_mixing of `text` (and a source text `src`, refused for an encoder–decoder) as the model reads it;
    on_step(done, total) after each layer of value zeroing (a job's slices)."""
    return context_mixing(lm, lm.encode(text, src), method, on_step=on_step)


def context_mixing(lm, inputs, method: str, interventions: dict | None = None,
                   on_step: Callable[[int, int], None] | None = None) -> np.ndarray:
    """The layers' matrices [L, T, T] of one of METHODS (the app's cached entry point)."""
    if method == "attention_norm":
        return attention_norms(lm, inputs, interventions)
    if method == "value_zeroing":
        return value_zeroing(lm, inputs, interventions, on_step)
    raise ValueError(f"unknown context-mixing method {method!r}; choose from {', '.join(METHODS)}")
