"""What lens, direct logit attribution and patching share beside the model's own `lm.readout()` (model/readout.py:
the residual stream's names, its logits and final-norm scale, running onward from a block): the answer as one
token id, a clean/corrupted prompt pair, and a row (layer) index checked against the model."""

from __future__ import annotations

from attnlab.model.inputs import InputError

MAX_ANSWER_CHARS = 100


def row_labels(n_blocks: int) -> list[str]:
    """'embed', then 'L0'..'L{n-1}': the stream after layer i (row i + 1)."""
    return ["embed", *(f"L{i}" for i in range(n_blocks))]


def check_row(layer: int | None, n_rows: int, what: str = "layer", has: str | None = None) -> int | None:
    """`layer` when 0 ≤ layer < n_rows (negative counts from the end), else one line saying the range (`has`: who
    has the rows, default "this model has {what}s")."""
    if layer is None:
        return None
    i = layer + n_rows if layer < 0 else layer
    if not 0 <= i < n_rows:
        raise InputError(f"{what} {layer} is out of range: {has or f'this model has {what}s'} 0–{n_rows - 1}")
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
