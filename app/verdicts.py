"""Verdicts: the PASS/FAIL checks of `attnlab check` as the KV cache and Backends pages show them — a table,
a banner, and a note that reads each difference against the size of the numbers compared."""

from __future__ import annotations

import pandas as pd
import streamlit as st


def verdict_table(rows: list[dict]) -> pd.DataFrame:
    """PASS/FAIL per check with its value and tolerance (the same numbers `attnlab check` prints)."""
    df = pd.DataFrame({
        "check": [c["name"] for c in rows],
        "verdict": ["✓ PASS" if c["passed"] else "✗ FAIL" for c in rows],
        "value": [c["value"] for c in rows],
        "tolerance": [c["tolerance"] for c in rows],
        "note": [c.get("note", "") for c in rows],
    })
    st.dataframe(df, hide_index=True, width="stretch", column_config={
        "value": st.column_config.NumberColumn("max |Δ| (or count)", format="%.3e"),
        "tolerance": st.column_config.NumberColumn("tolerance", format="%.0e")})
    return df


def scale_note(rows: list[dict], scale: dict) -> None:
    """Read each max |Δ| against the size of the numbers compared (float32 keeps ~7 significant digits)."""
    big = scale["logits"] if scale.get("logits") else scale["hidden"]
    rel = [f"{c['name']}: {c['value'] / big:.1e}" for c in rows  # the checks that compare outputs
           if c["value"] is not None and ("logits" in c["name"] or c["name"].startswith("eager_vs")) and big]
    if rel:
        what = "logits" if scale.get("logits") else "hidden states"
        st.caption(f"For scale: the {what} of this input reach ±{big:.3g}, so relative to them the differences are "
                   f"{'; '.join(rel)}. float32 resolves about 7 significant digits (ε = {scale['eps']:.1e}): "
                   "differences of a few ε relative are rounding, not a bug; a fixed absolute tolerance can "
                   "fail on large logits for that reason alone.")


def verdict_banner(passed: bool, ok: str, bad: str) -> None:
    """A green box saying `ok`, or a red one saying `bad`."""
    (st.success if passed else st.error)(ok if passed else bad,
                                         icon=":material/check_circle:" if passed else ":material/cancel:")
