"""Context mixing of an encoder–decoder (analysis.probes.context_mixing's two measures), per layer of each of its three
attentions: the encoder's self-attention over the source [S, S], the decoder's self-attention over the target
[T, T], and the decoder's cross-attention from each target token to the source tokens [T, S].

  attention_norm  N_l[i, j] = ‖Σ_h α_h[i, j] · v_h(x_j) W_O^h‖ with that attention's values and output projection;
      for the cross-attention, v_h(x_j) is head h's value of source token j read from the encoder's output (the
      memory), α the cross-attention's pattern.
  value_zeroing   Z_l[i, j] = 1 − cos(y_i, y_i^¬j), each row divided by its sum (a zero row stays zero): the
      encoder's block l for its self-attention; the decoder's block l (self-attention, cross-attention and MLP) for
      the decoder's self-attention, and for the cross-attention with source token j's value zeroed in every head of
      that block's cross-attention (Mohebbi et al. 2023; Inseq's ValueZeroing on encoder–decoders). Each layer alone,
      from the clean run's stream and memory: (S + 1) encoder-block runs per encoder layer, (T + 1) + (S + 1)
      decoder-block runs per decoder layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.attention.rollout import rownorm
from attnlab.analysis.probes.mixing_parts import site_norms, zeroed_distances
from attnlab.analysis.probes.pass_size import rows_per_pass
from attnlab.model.readout import Readout

GROUPS = ("encoder", "decoder", "cross")  # CapturedRun.matrices' names of the three attentions


@dataclass(frozen=True)
class EncDecMixing:
    """One method's matrices, float64, per layer of each attention: encoder [Le, S, S] (the encoder's
    self-attention), decoder [Ld, T, T] (the decoder's self-attention), cross [Ld, T, S] (the decoder's
    cross-attention: row = target token, column = source token)."""

    encoder: np.ndarray
    decoder: np.ndarray
    cross: np.ndarray

    def group(self, name: str) -> np.ndarray:
        """The matrices of one of GROUPS."""
        if name not in GROUPS:
            raise ValueError(f"unknown attention {name!r}; choose from {', '.join(GROUPS)}")
        return getattr(self, name)


def _sites(lm) -> dict[str, list]:
    """{group: its attention modules, layer by layer}."""
    enc, dec = lm.model.encoder, lm.model.decoder
    return {"encoder": [b.attn for b in enc.blocks], "decoder": [b.attn for b in dec.blocks],
            "cross": [b.cross_attn for b in dec.blocks]}


def zeroing_flops(lm, t: int | np.ndarray, s: int | np.ndarray) -> float | np.ndarray:
    """Multiply–adds ×2 of value zeroing over s source and t target tokens: every encoder block run by s + 1 rows of
    s tokens, every decoder block by (t + 1) + (s + 1) rows of t tokens (the weights once per token, the scores and
    the weighted sums 4·queries·keys·d_attn per block)."""
    enc, dec, d = lm.model.encoder.blocks, lm.model.decoder.blocks, lm.cfg.d_attn
    w_enc, w_dec = (sum(p.numel() for p in b.parameters()) for b in (enc, dec))
    encoder = (s + 1) * s * (2.0 * w_enc + 4.0 * len(enc) * s * d)
    decoder = (t + s + 2) * t * (2.0 * w_dec + 4.0 * len(dec) * (t + s) * d)
    return encoder + decoder


@torch.no_grad()
def attention_norms(lm, inputs, interventions: dict | None = None) -> EncDecMixing:
    """N of every layer of the three attentions (module docstring), of one run under `interventions`."""
    sites = _sites(lm)
    n = site_norms(lm, inputs, [m for ms in sites.values() for m in ms], interventions)
    return EncDecMixing(**{g: np.stack([n[m.site] for m in ms]) for g, ms in sites.items()})  # [L, Q, K] each


def memory_hook(lm) -> str:
    """The hook whose tensor, through the encoder's final norm (if any), is the memory the cross-attention reads."""
    return f"{lm.model.encoder.blocks[-1].site}.hook_resid_post"


@torch.no_grad()
def value_zeroing(lm, inputs, interventions: dict | None = None,
                  on_step: Callable[[int, int], None] | None = None) -> EncDecMixing:
    """Z of every layer of the three attentions (module docstring), rows summing to 1 (or 0), of the run under
    `interventions` (one on a value acts before the zeroing). on_step(done, total) after each block's runs."""
    enc, dec = lm.model.encoder, lm.model.decoder
    memory_name = memory_hook(lm)
    names = [f"{b.site}.hook_resid_pre" for b in (*enc.blocks, *dec.blocks)] + [memory_name]
    cap = lm.forward(inputs, names=names, interventions=interventions, records=False).capture
    memory = enc.final_norm(cap.tensor(memory_name))  # [1, S, D]: outside the capture, the plain norm
    S, T, device = memory.shape[1], inputs.ids.shape[1], memory.device
    src_mask = None if inputs.src_mask is None else inputs.src_mask.to(device)  # [1, S]
    e_ro, d_ro = Readout(enc, None), Readout(dec, None)
    e_ctx = e_ro.contexts(S, "eager", device=device, attention_mask=src_mask)
    d_ctx = d_ro.contexts(T, "eager", device=device)
    per = max(1, rows_per_pass(lm, max(S, T), grad=False) - 1)  # zeroed rows per batch, beside the clean one
    out = {g: [] for g in GROUPS}
    total = len(enc.blocks) + len(dec.blocks)
    for layer, b in enumerate(enc.blocks):
        x = cap.tensor(f"{b.site}.hook_resid_pre")  # [1, S, D]

        def run(n, iv, layer=layer, x=x):  # [n, S, D]
            return e_ro.run_from(layer, x.expand(n, -1, -1), layer + 1, contexts=e_ctx, interventions=iv)

        out["encoder"].append(zeroed_distances(run, b.attn.site, S, per, interventions))
        if on_step is not None:
            on_step(layer + 1, total)
    for layer, b in enumerate(dec.blocks):
        x = cap.tensor(f"{b.site}.hook_resid_pre")  # [1, T, D]

        def run(n, iv, layer=layer, x=x):  # [n, T, D]
            return d_ro.run_from(layer, x.expand(n, -1, -1), layer + 1, contexts=d_ctx, interventions=iv,
                                 memory=memory.expand(n, -1, -1), memory_mask=src_mask)

        out["decoder"].append(zeroed_distances(run, b.attn.site, T, per, interventions))
        out["cross"].append(zeroed_distances(run, b.cross_attn.site, S, per, interventions))
        if on_step is not None:
            on_step(len(enc.blocks) + layer + 1, total)
    return EncDecMixing(**{g: rownorm(np.clip(np.stack(z), 0.0, None)) for g, z in out.items()})  # [L, Q, K] each
