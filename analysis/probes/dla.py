"""Direct logit attribution: the answer's logit at one position split into what each head, each MLP, the
embeddings and the biases write into the residual stream, read through the final norm with its scale frozen.

The final stream of a pre-norm model is a sum, x = embed + Σ_layers (Σ_heads result_h + b_O + mlp_out) (a
parallel block, GPT-NeoX's and Phi's, adds its attention and MLP outputs to the same x: the same sum); the
final norm is linear once its divisor σ(x) is fixed (TransformerLens's convention, stated in every result), so
logit = Σ_c (centre(c) / σ) · (w ⊙ W_U[answer]) + b_norm · W_U[answer] (+ the unembedding's bias) exactly.
With a wrong answer the direction is W_U[answer] − W_U[wrong] and the total is the logit difference. A model that
soft-caps its logits (tanh) is attributed before the cap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from attnlab.analysis.probes.readout import answer_id, check_row
from attnlab.model.inputs import InputError


@dataclass
class DLA:
    model: str
    tokens: list[str]
    position: int
    answer: str
    wrong: str | None
    heads: np.ndarray  # [L, H] self-attention heads
    cross_heads: np.ndarray | None  # [L, H] cross-attention heads (an encoder–decoder's decoder)
    mlps: np.ndarray  # [L] each MLP (its bias included)
    embed: float  # the stream before block 0 (token + position embeddings)
    attn_bias: float  # Σ over layers of the attention output biases
    norm_bias: float  # the final norm's bias (+ the unembedding's bias)
    total: float  # the sum of every part above
    logit: float  # the model's own logit (or logit difference)
    scale: float  # the frozen final-norm divisor σ at the position
    norm: str  # "LayerNorm" or "RMSNorm"

    def to_json(self) -> dict:
        def r(a):
            return np.round(np.asarray(a, dtype=float), 6).tolist()

        return {"model": self.model, "tokens": self.tokens, "position": self.position, "answer": self.answer,
                "wrong": self.wrong, "logit": r(self.logit), "total": r(self.total),
                "frozen_scale": {"norm": self.norm, "sigma": r(self.scale)},
                "embed": r(self.embed), "attn_bias": r(self.attn_bias), "norm_bias": r(self.norm_bias),
                "heads": r(self.heads), "mlps": r(self.mlps),
                **({"cross_heads": r(self.cross_heads)} if self.cross_heads is not None else {})}


def _head_results(attn: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """Each head's output at one position: z [H, d] → [H, D] (float64), before the bias."""
    H, d = z.shape
    w = attn.out.weight.double().view(-1, H, d)  # [D, H·d] -> [D, H, d]
    return torch.einsum("hd,ehd->he", z.double(), w)


@torch.no_grad()
def direct_logit_attribution(lm, text: str, answer: str, wrong: str | None = None, *, src_text: str | None = None,
                             position: int = -1, backend: str = "eager") -> DLA:
    """Split the logit of `answer` (minus `wrong`'s) at `position` (default the last) into its direct parts."""
    ro = lm.readout(need_linear=True)
    stack, head = ro
    if lm.cfg.norm not in ("pre", "parallel") or isinstance(stack.ln_f, nn.Identity):
        raise InputError(f"{lm.name} is {lm.cfg.norm}-norm: its stream is not a sum of the heads' outputs; "
                         "direct logit attribution needs a pre-norm or parallel model")
    a = answer_id(lm, answer)
    b = answer_id(lm, wrong, "wrong answer") if wrong is not None else None
    inputs = lm.encode(text, src_text)
    T = inputs.ids.shape[1]
    pos = check_row(position, T, "position", has="the text has positions")
    blocks = stack.blocks
    attns = [(blk.attn, blk.cross_attn if blk.has_cross else None) for blk in blocks]
    names = ro.resid_names + ro.block_hooks("hook_mlp_out") + [
        f"{m.site}.hook_z" for pair in attns for m in pair if m is not None]
    fwd = lm.forward(inputs, backend=backend, names=names, records=False)
    t = fwd.capture.tensor

    u = ro.direction(a).double()  # [D] the unembedding direction
    if b is not None:
        u = u - ro.direction(b).double()
    ln = stack.ln_f
    x_final = t(ro.resid_names[-1])[0, pos].double()  # [D]
    sigma = ro.final_scale(x_final)  # [1]
    w = ln.weight.double() if ln.weight is not None else torch.ones_like(u)
    centre = isinstance(ln, nn.LayerNorm)

    def read(c: torch.Tensor) -> torch.Tensor:
        """c [..., D] → its direct contribution [...]: (centre(c) / σ) · (w ⊙ u)."""
        c = c.double()
        if centre:
            c = c - c.mean(-1, keepdim=True)
        return (c / sigma) @ (w * u)

    embed = read(t(ro.resid_names[0])[0, pos])
    heads, cross, bias = [], [], torch.zeros((), dtype=torch.float64)
    for attn, cattn in attns:
        for m, out in ((attn, heads), (cattn, cross)):
            if m is None:
                continue
            out.append(read(_head_results(m, t(f"{m.site}.hook_z")[0, pos])))  # [H]
            if m.out.bias is not None:
                bias = bias + read(m.out.bias)
    mlps = torch.stack([read(t(n)[0, pos]) for n in ro.block_hooks("hook_mlp_out")])  # [L]
    nb = ln.bias.double() @ u if getattr(ln, "bias", None) is not None else torch.zeros((), dtype=torch.float64)
    if head.bias is not None:
        nb = nb + head.bias[a].double() - (head.bias[b].double() if b is not None else 0)
    heads_t = torch.stack(heads)  # [L, H]
    total = embed + heads_t.sum() + bias + mlps.sum() + nb + (torch.stack(cross).sum() if cross else 0)
    if getattr(stack, "logit_softcap", None) is None:
        logits = fwd.logits[0, pos].double()
    else:  # a soft cap (tanh) is not a sum: the parts add up to the logit before it
        logits = head(ro.norm(t(ro.resid_names[-1])[0, pos])).double()
    logit = logits[a] - (logits[b] if b is not None else 0)
    return DLA(lm.name, list(inputs.tokens), pos, lm.label(a), lm.label(b) if b is not None else None,
               heads_t.cpu().numpy(), torch.stack(cross).cpu().numpy() if cross else None, mlps.cpu().numpy(),
               float(embed), float(bias), float(nb), float(total), float(logit), float(sigma), type(ln).__name__)
