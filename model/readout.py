"""The readout of a loaded model (`lm.readout()`): the stack whose residual stream predicts tokens and the head that
maps it to logits, with what probes ask of them — the residual stream's hook names, the final norm and its frozen
scale, the logits of a stream, and running a stream onward from any block; and the input embeddings
(`lm.embed_modules()`) that gradient attributions run along."""

from __future__ import annotations

from contextlib import nullcontext
from typing import NamedTuple

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.inputs import InputError
from attnlab.model.norms import has_hooks


class Readout(NamedTuple):
    """(stack, head); unpacks as the pair. `stack` has blocks, ln_f and a site; `head` is a linear unembedding
    or a masked-LM head."""

    stack: nn.Module
    head: nn.Module

    # -- names ----------------------------------------------------------------------------------------
    @property
    def n_blocks(self) -> int:
        return len(self.stack.blocks)

    @property
    def resid_names(self) -> list[str]:
        """The residual stream before each block and after the last: n_blocks + 1 hook names."""
        blocks = self.stack.blocks
        return [f"{b.site}.hook_resid_pre" for b in blocks] + [f"{blocks[-1].site}.hook_resid_post"]

    def block_hooks(self, point: str) -> list[str]:
        """One hook name per block: `point` under each block ("hook_mlp_out", "attn.hook_z", …)."""
        return [f"{b.site}.{point}" for b in self.stack.blocks]

    # -- reading the stream ------------------------------------------------------------------------------
    def norm(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm of residual vectors x [..., D] (the identity in a post-norm stack)."""
        return self.stack.ln_f(x)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits [..., V] of residual vectors x [..., D] as the model computes them: final norm, the head
        (after T5's logit scale) and a logit soft cap."""
        h = self.norm(x)
        out = getattr(self.stack, "project_out", None)  # OPT-350m: back to the token embeddings' width
        h = h if out is None else out(h)
        scale = getattr(self.stack, "logit_scale", 1.0)
        logits = self.head(h * scale if scale != 1.0 else h)
        cap = getattr(self.stack, "logit_softcap", None)
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def direction(self, token: int) -> torch.Tensor:
        """The residual-stream direction [D] the head reads `token`'s logit along (after the final norm): its
        unembedding row, through OPT-350m's projection back to the embeddings' width, times T5's logit scale."""
        u = self.head.weight[token]  # [D] ([E] before project_out)
        out = getattr(self.stack, "project_out", None)
        u = u if out is None else u @ out.weight  # [E] @ [E, D] -> [D]
        scale = getattr(self.stack, "logit_scale", 1.0)
        return u * scale if scale != 1.0 else u

    def final_scale(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm's divisor for residual vectors x [..., D] (LayerNorm: the centred std, RMSNorm: the
        rms), [..., 1]: frozen, it makes the norm linear in x (TransformerLens's convention; what
        ln_final.hook_scale holds in a run)."""
        ln = self.stack.ln_f
        if not has_hooks(ln):
            raise InputError("direct logit attribution needs a final LayerNorm or RMSNorm (a pre-norm model)")
        return ln.scale(x)

    def final_output(self, normalized: torch.Tensor) -> torch.Tensor:
        """The final norm's output [..., D] from ln_final.hook_normalized's value (before its weight and bias, as in
        TransformerLens): x̂·w (+ b), the hidden state the head reads."""
        ln = self.stack.ln_f
        return ln.affine(normalized) if has_hooks(ln) else normalized

    # -- running onward ---------------------------------------------------------------------------------
    def contexts(self, T: int, backend: str = "eager", device=None, attention_mask: torch.Tensor | None = None) -> list:
        """Each block's attention context in a plain run over T tokens (any batch; `attention_mask` bool [N, T]: each
        row's real tokens, for texts padded to one length): pass to run_from."""
        return self.stack.blocks_ctx(T, backend, device=device, attention_mask=attention_mask)

    def run_from(self, layer: int, x: torch.Tensor, stop: int | None = None, *, backend: str = "eager",
                 contexts: list | None = None, interventions: dict | None = None, memory: torch.Tensor | None = None,
                 memory_mask: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The residual stream x [N, T, D] entering block `layer`, run through blocks layer … stop − 1 (default:
        to the last): the stream after them, [N, T, D] (before the final norm). `contexts` from contexts() saves
        rebuilding them per call (else they are built here, with `attention_mask` bool [N, T]: each row's real
        tokens); `interventions` {hook name: fn(x, name)} act on hooks inside these blocks. An encoder–decoder's
        decoder reads `memory` [N, S, D], the encoder's output of each row's own source (`memory_mask` bool [N, S]:
        its real tokens, for sources padded to one length)."""
        blocks = self.stack.blocks
        stop = len(blocks) if stop is None else stop
        if not 0 <= layer <= stop <= len(blocks):
            raise InputError(f"blocks {layer}–{stop - 1} are out of range: this model has blocks 0–{len(blocks) - 1}")
        if memory is None and any(blocks[i].has_cross for i in range(layer, stop)):
            raise InputError("these blocks read an encoder's output through cross-attention: pass memory=")
        ctxs = contexts if contexts is not None else self.contexts(x.shape[1], backend, x.device, attention_mask)
        cross = self.stack.cross_ctx(x.shape[1], memory, memory_mask, backend, x.device)
        with hooks.intervene(interventions) if interventions else nullcontext():
            for i in range(layer, stop):
                x = blocks[i](x, ctxs[i], cross)
        return x


class Reading:
    """LoadedModel's readout and input embeddings: the model's own modules, named so that probes need not reach
    into them (model/loaded.py mixes this in)."""

    def readout(self, need_linear: bool = False) -> Readout:
        """The stack whose blocks write the residual stream that predicts tokens, and the module mapping its
        final-normed hidden state to logits. `need_linear`: a plain unembedding (no MLM head)."""
        m = self.model
        if self.predicts_next_token and m.lm_head is not None:
            return Readout(m, m.lm_head)
        if self.reads_source:
            return Readout(m.decoder, m.decoder.lm_head)
        if self.fills_masks and m.mlm is not None and not need_linear:
            return Readout(m, m.mlm)
        what = "a vision transformer" if self.reads_image else "an encoder" if self.fills_masks else "this model"
        head = "a linear unembedding" if need_linear else "a token head"
        raise InputError(f"{self.name} is {what} without {head}; pick a decoder (e.g. lecture-decoder)")

    def embed_modules(self) -> dict[str, nn.Module]:
        """{hook name: the embedding module whose `hook_embed` point that is}: one per stack that reads tokens."""
        m = self.model
        if self.reads_source:
            return {"encoder.hook_embed": m.encoder.embed, "decoder.hook_embed": m.decoder.embed}
        return {"hook_embed": m.embed}
