"""What lens, direct logit attribution and patching share beside the model's own `lm.readout()` (the stack whose
residual stream predicts tokens, and its unembedding): a stack's logits and final-norm scale, the answer as one
token id, and a row (layer) index checked against the model."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model.inputs import InputError

MAX_ANSWER_CHARS = 100


def logits_of(stack: nn.Module, head: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """The logits of final-normed hidden states h, as the model computes them (a logit soft cap included)."""
    logits = head(h)
    cap = getattr(stack, "logit_softcap", None)
    return logits if cap is None else torch.tanh(logits / cap) * cap


def resid_names(stack: nn.Module) -> list[str]:
    """The residual stream before each block and after the last: len(blocks) + 1 hook names."""
    return [f"{b.site}.hook_resid_pre" for b in stack.blocks] + [f"{stack.blocks[-1].site}.hook_resid_post"]


def row_labels(n_blocks: int) -> list[str]:
    """'embed', then 'L0'..'L{n-1}': the stream after layer i (row i + 1)."""
    return ["embed", *(f"L{i}" for i in range(n_blocks))]


def check_row(layer: int | None, n_rows: int, what: str = "layer") -> int | None:
    """`layer` when 0 ≤ layer < n_rows (negative counts from the end), else one line saying the range."""
    if layer is None:
        return None
    i = layer + n_rows if layer < 0 else layer
    if not 0 <= i < n_rows:
        raise InputError(f"{what} {layer} is out of range: this model has {what}s 0–{n_rows - 1}")
    return i


def answer_id(lm, token: str | None, what: str = "answer") -> int:
    """The id of `token` as one token: a word is read with its leading space when that is one token (as it
    follows a space in a prompt), else as typed; several tokens or none is one line of error."""
    if token is None or not token.strip() or len(token) > MAX_ANSWER_CHARS:
        raise InputError(f"the {what} must be one token (1–{MAX_ANSWER_CHARS} characters), got {token!r}")
    for cand in ([" " + token] if not token.startswith(" ") else []) + [token]:
        i = lm.single_token_id(cand)
        if i is not None:
            return i
    parts = lm.tokenizer.encode(token, add_special=False).labels
    raise InputError(f"the {what} {token!r} is {len(parts)} tokens ({' · '.join(parts)}); choose a single token")


def prompt_pair(lm, clean: str, corrupt: str, answer: str, wrong: str, task: str, max_tokens: int):
    """(answer id, wrong id, clean Inputs, corrupted Inputs) of a clean/corrupted pair, each checked in one line:
    two different single tokens, prompts of equal length and at most `max_tokens` (`task` names the sweep)."""
    a, b = answer_id(lm, answer), answer_id(lm, wrong, "wrong answer")
    if a == b:
        raise InputError("the answer and the wrong answer are the same token")
    ci, xi = lm.encode(clean), lm.encode(corrupt)
    T, T2 = ci.ids.shape[1], xi.ids.shape[1]
    if T != T2:
        raise InputError(f"the clean prompt is {T} tokens and the corrupted one {T2}; {task} needs equal lengths")
    if T > max_tokens:
        raise InputError(f"the prompts are {T} tokens; {task} takes at most {max_tokens}")
    return a, b, ci, xi


def final_scale(stack: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The final norm's divisor for residual vectors x [..., D] (LayerNorm: the centred std, RMSNorm: the rms),
    [..., 1]: frozen, it makes the norm linear in x (TransformerLens's convention)."""
    ln = stack.ln_f
    if isinstance(ln, nn.LayerNorm):
        xc = x - x.mean(-1, keepdim=True)
        return (xc.pow(2).mean(-1, keepdim=True) + ln.eps).sqrt()
    if isinstance(ln, nn.RMSNorm):
        eps = ln.eps if ln.eps is not None else torch.finfo(x.dtype).eps
        return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    raise InputError("direct logit attribution needs a final LayerNorm or RMSNorm (a pre-norm model)")
