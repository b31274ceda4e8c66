"""Tokens on the page as text: the token strip (escaped chips shaded by a weight per token, words outside the
model's vocabulary marked), the note that says how many there are, and the table of a prediction's top tokens."""

from __future__ import annotations

import html

import numpy as np
import streamlit as st
from attnlab.app.figures.style import md
from attnlab.model.tokenizer import nearest_word

ENGLISH_MODEL = "minilm"  # the installed model whose vocabulary covers English
NEAREST_MAX_VOCAB = 5000  # a word-level vocabulary small enough to search for the nearest word of each unknown one
NAMED = 8  # unknown words named in the note


def vocabulary(lm) -> dict:
    """What a page says about `lm`'s vocabulary: {"name", "size", "unk_id" (the tokenizer's unknown-token id,
    None for a tokenizer without one, e.g. bytes, which reads every text), "scope" (a phrase), "words" (a small
    word-level vocabulary's words, to name the nearest one of an unknown word; else empty)}."""
    size = int(lm.tokenizer.vocab_size)
    scope = (f"a vocabulary of {size} tokens, the words of the generated lecture corpus" if lm.source == "bundled"
             else f"a vocabulary of {size:,} tokens")
    unk = getattr(lm.tokenizer, "unk_id", None)
    words = []
    if unk is not None and size <= NEAREST_MAX_VOCAB:
        words = sorted(w for w in lm.tokenizer.tok.get_vocab(with_added_tokens=False)
                       if w.isalnum() and not w.startswith("##"))
    return {"name": lm.name, "size": size, "unk_id": unk, "scope": scope, "words": words}


def unknown_positions(ids, vocab: dict) -> list[int]:
    """Positions whose id is the tokenizer's unknown token (none when it has no such token)."""
    unk = vocab.get("unk_id")
    return [] if unk is None or ids is None else [i for i, t in enumerate(ids) if int(t) == unk]


def unknown_named(vocab: dict, unknown: list[int], tokens) -> str:
    """The unknown words as typed, each with the nearest known word: '“Jonh” (nearest known word: john)'."""
    seen: dict[str, str | None] = {}
    for i in unknown:
        word = str(tokens[i]) if i < len(tokens) else ""
        if word and word not in seen and len(seen) < NAMED:
            seen[word] = nearest_word(word, vocab.get("words") or []) if word.isalnum() else None
    named = [f"{md(w)} (nearest known word: {md(n)})" if n else md(w) for w, n in seen.items()]
    more = len({str(tokens[i]) for i in unknown if i < len(tokens)}) - len(seen)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def unknown_note(vocab: dict, unknown: list[int], n_tokens: int, what: str = "text", tokens=None) -> None:
    """A warning when words of the `what` became the unknown token: how many, which (with the nearest known
    word, given the `tokens`), the vocabulary's scope and a model that knows English. Nothing when every token is
    known."""
    if not unknown:
        return
    k = len(unknown)
    which = f" Unknown: {unknown_named(vocab, unknown, tokens)}." if tokens is not None else ""
    tip = "" if vocab["name"] == ENGLISH_MODEL else (f" For English text pick **{ENGLISH_MODEL}** in the sidebar "
                                                      "(a BERT vocabulary of 30,522 word pieces).")
    st.warning(f"{k} of {n_tokens} tokens of the {what} are unknown to **{html.escape(vocab['name'])}** "
               f"(marked ✖ with a red dashed border): it knows {vocab['scope']}, and every other word becomes "
               f"the same [UNK] token, so the model cannot tell them apart.{which}{tip}", icon=":material/help:")


def token_strip(tokens, weights=None, *, query: int | None = None, source: int | None = None,
                label: str | None = None, unknown=()) -> None:
    """Tokens as escaped HTML chips, shaded by `weights` (scaled to their max over the other tokens
    than the query); the query token is outlined, the ground-truth source underlined, the `unknown`
    positions (read as [UNK]) marked ✖ with a red dashed border. Tokens are never rendered as markup."""
    unknown = set(unknown)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)  # [T]
    others = w if w is None or query is None or len(w) < 2 else np.delete(w, query)  # [T − 1]: not the query
    top = float(np.nanmax(others)) if w is not None and others.size and np.nanmax(others) > 0 else 1.0
    chips = []
    for i, t in enumerate(tokens):
        a = 0.0 if w is None else float(np.clip(w[i] / top, 0, 1))
        style = [f"background: rgba(31,119,180,{0.08 + 0.85 * a:.3f})" if w is not None else
                 "background: rgba(128,128,128,0.12)"]
        if a > 0.55:
            style.append("color: #fff")
        if i == query:
            style.append("outline: 3px solid #ff7f0e")
        if i == source:
            style.append("text-decoration: underline 3px #d62728")
        if i in unknown:
            style.append("border: 2px dashed #d62728")
        tip = f"{i}: {t}" + (" — unknown to the model, read as [UNK]" if i in unknown else "") + (
            "" if w is None else f" — {w[i]:.4f}")
        chips.append(f'<span class="tok{" unk" if i in unknown else ""}" title="{html.escape(tip)}" '
                     f'style="{"; ".join(style)}"><sub>{i}</sub>{"✖" if i in unknown else ""}'
                     f'{html.escape(str(t))}</span>')
    head = f'<div class="cap">{html.escape(label)}</div>' if label else ""
    st.html(
        "<style>.strip{line-height:2.3;font-family:ui-monospace,monospace;}"
        ".strip .tok{padding:2px 6px;margin:2px;border-radius:6px;white-space:pre;display:inline-block;}"
        ".strip sub{opacity:.55;font-size:.65em;margin-right:2px}.cap{font-size:.9em;opacity:.75}</style>"
        f'<div class="strip">{head}{"".join(chips)}</div>')


def predictions_table(tokens: list[str], probs) -> None:
    """The top tokens of a prediction with their probabilities as bars."""
    import pandas as pd

    st.dataframe(pd.DataFrame({"token": tokens, "probability": np.asarray(probs, dtype=float)}),
                 hide_index=True, column_config={"probability": st.column_config.ProgressColumn(
                     "probability", min_value=0.0, max_value=1.0, format="%.3f")})
