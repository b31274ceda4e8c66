"""Input validation: every bad input becomes one clear InputError naming the limit."""

from __future__ import annotations

import unicodedata

MAX_TEXT_CHARS = 20_000  # characters per text box / --text
MAX_GENERATE = 256  # new tokens per generation request


class InputError(ValueError):
    """Bad user input; the message says what is wrong and what the limit is."""


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
        raise InputError(f"the {what} is {n_tokens:,} tokens long; this model's context is {max_len:,} tokens")
    if n_tokens == 0:
        raise InputError(f"the {what} gave no tokens")


def check_generate(n: int) -> int:
    if not 0 <= n <= MAX_GENERATE:
        raise InputError(f"can generate 0 to {MAX_GENERATE} new tokens, not {n}")
    return n
