"""Tokens on the page as text: the token strip (escaped chips shaded by a weight per token) and the table
of a prediction's top tokens."""

from __future__ import annotations

import html

import numpy as np
import streamlit as st


def token_strip(tokens, weights=None, *, query: int | None = None, source: int | None = None,
                label: str | None = None) -> None:
    """Tokens as escaped HTML chips, shaded by `weights` (scaled to their max over the other tokens
    than the query); the query token is outlined, the ground-truth source underlined. Tokens are
    never rendered as markup."""
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
        tip = f"{i}: {t}" + ("" if w is None else f" — {w[i]:.4f}")
        chips.append(f'<span class="tok" title="{html.escape(tip)}" style="{"; ".join(style)}">'
                     f'<sub>{i}</sub>{html.escape(str(t))}</span>')
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
