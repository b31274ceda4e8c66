"""The inputs of one forward pass, and their validation: every bad input becomes one clear InputError."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, replace

import torch

MAX_TEXT_CHARS = 20_000  # characters per text box / --text
MAX_GENERATE = 256  # new tokens per generation request


class InputError(ValueError):
    """Bad user input; the message says what is wrong and what the limit is."""


class OverContextError(InputError):
    """A text of more tokens than the model reads: `what` (text, source text, target text), its token count,
    the limit and the model's name (when known), so that a page can offer to keep the first tokens."""

    def __init__(self, message: str, what: str, n_tokens: int, limit: int, model: str | None = None):
        super().__init__(message)
        self.what, self.n_tokens, self.limit, self.model = what, n_tokens, limit, model


def validate_text(text: str | None, what: str = "text") -> str:
    """Return `text` if usable; raise InputError for empty, too long or control characters."""
    if text is None or not text.strip():
        raise InputError(f"the {what} is empty; type or choose some text")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"the {what} has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    for i, ch in enumerate(text):
        if ch not in "\t\n\r" and unicodedata.category(ch) == "Cc":
            raise InputError(
                f"the {what} contains a control character U+{ord(ch):04X} at position {i}; "
                "remove it (only tab and newline are allowed)")
    return text


def check_tokens(n_tokens: int, max_len: int, what: str = "text") -> None:
    if n_tokens > max_len:
        raise OverContextError(f"the {what} is {n_tokens:,} tokens long; this model's context is {max_len:,} tokens",
                               what, n_tokens, max_len)
    if n_tokens == 0:
        raise InputError(f"the {what} gave no tokens")


def check_generate(n: int) -> int:
    if not 0 <= n <= MAX_GENERATE:
        raise InputError(f"can generate 0 to {MAX_GENERATE} new tokens, not {n}")
    return n


@dataclass
class Inputs:
    """Token ids (or a ViT's pixels) of one forward pass and their display labels."""

    ids: torch.Tensor  # long [B, T]; a ViT: the token index 0..T−1 (0 = CLS, 1 + p = patch p)
    tokens: list[str]  # display labels of ids[0]
    src_ids: torch.Tensor | None = None  # long [B, S] (encoder–decoder source)
    src_tokens: list[str] | None = None
    type_ids: torch.Tensor | None = None  # long [B, T] (BERT sentence pairs)
    src_mask: torch.Tensor | None = None  # bool [B, S], True = a real source token (batches with padding)
    attention_mask: torch.Tensor | None = None  # bool [B, T], True = a real token (batches with padding)
    pixels: torch.Tensor | None = None  # float [B, C, H, W], preprocessed (a ViT's input)

    def to(self, device: str | torch.device) -> Inputs:
        """The same inputs with every tensor on `device` (itself when they already are); a padding mask that marks
        every token real is dropped while it is still on the host (the forward then takes the unmasked path
        without asking its device)."""
        real = {f: None for f in ("attention_mask", "src_mask") if _all_real(getattr(self, f))}
        if real:
            return replace(self, **real).to(device)
        if self.ids.device == torch.device(device):
            return self

        def move(t):
            return None if t is None else t.to(device)

        return replace(self, ids=move(self.ids), src_ids=move(self.src_ids), type_ids=move(self.type_ids),
                       src_mask=move(self.src_mask), attention_mask=move(self.attention_mask),
                       pixels=move(self.pixels))

    def expand(self, batch: int) -> Inputs:
        """The same single sequence repeated `batch` times (batch 1 only)."""
        def rep(t):
            return None if t is None else t.expand(batch, -1)

        pixels = None if self.pixels is None else self.pixels.expand(batch, -1, -1, -1)
        return replace(self, ids=rep(self.ids), src_ids=rep(self.src_ids), type_ids=rep(self.type_ids),
                       src_mask=rep(self.src_mask), attention_mask=rep(self.attention_mask), pixels=pixels)

    def span(self, start: int, stop: int) -> Inputs:
        """Target positions start..stop−1 (a cached step); the source stays whole."""
        def cut(t):
            return None if t is None else t[:, start:stop]

        return replace(self, ids=cut(self.ids), tokens=self.tokens[start:stop], type_ids=cut(self.type_ids),
                       attention_mask=cut(self.attention_mask))


def _all_real(mask: torch.Tensor | None) -> bool:
    """True for a host padding mask with no padding (a device's mask is never read here: that would wait on it)."""
    return mask is not None and mask.device.type == "cpu" and bool(mask.all())
