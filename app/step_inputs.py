"""The Step by step page's own inputs: small editable matrices kept in the URL (`key=1,0;0,1`), and the
button callbacks of the page (module functions: the session state must stay picklable)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.app.url_state import URL, kept, url_active


# -- editable matrices, kept in the URL ---------------------------------------------------------------
def encode_matrix(m) -> str:
    """'1,0,-1;2,0.5,1' (rows by ';', up to 4 significant digits)."""
    return ";".join(",".join(f"{v:.4g}" for v in row) for row in np.asarray(m, dtype=np.float64))


def decode_matrix(s: str, max_side: int = 12) -> np.ndarray:
    """The matrix of `encode_matrix`; ValueError unless finite and 1..max_side per side."""
    rows = [[float(x) for x in r.split(",")] for r in s.strip().split(";") if r.strip()]
    a = np.array(rows, dtype=np.float64)  # [rows, cols]
    if a.ndim != 2 or not 1 <= a.shape[0] <= max_side or not 1 <= a.shape[1] <= max_side or not np.isfinite(a).all():
        raise ValueError("not a finite matrix")
    return a


def matrix_editor(label: str, key: str, default, *, row_labels, col_labels, where=None) -> np.ndarray:
    """An st.data_editor over a small matrix. Its value lives in the URL as `key=1,0;0,1`, seeded (in this
    order) from the URL, from this session, or from `default`; `reset_matrix(key, m)` replaces it."""
    ss = st.session_state
    base = f"_{key}_base"
    want = np.asarray(default).shape
    if base not in ss or ss[base].shape != want:
        value = np.asarray(default, dtype=np.float64)
        raw = st.query_params.get(key) if url_active() else None
        for cand in (raw, kept().get(key)):
            try:
                m = decode_matrix(cand) if isinstance(cand, str) else np.asarray(cand, dtype=np.float64)
                if cand is not None and m.shape == want:
                    value = m
                    break
            except (ValueError, TypeError):
                continue
        ss[base] = value
        ss[f"_{key}_ver"] = ss.get(f"_{key}_ver", 0) + 1
    where = where or st
    df = pd.DataFrame(ss[base], index=list(row_labels), columns=list(col_labels))
    cfg = {c: st.column_config.NumberColumn(c, format="%.2f", step=0.1, required=True) for c in df.columns}
    if label:
        where.markdown(label)
    edited = where.data_editor(df, key=f"{key}-editor-{ss[f'_{key}_ver']}", num_rows="fixed", column_config=cfg,
                               width="content")
    m = edited.to_numpy(dtype=np.float64, na_value=np.nan)
    if not np.isfinite(m).all():
        raise ValueError(f"every cell of {label or key} needs a number")
    ss[base] = m  # the edits survive leaving the page (the editor's own state does not)
    kept()[key] = m
    ss.setdefault(URL, {})[key] = encode_matrix(m)
    return m


def reset_matrix(key: str, m) -> None:
    """Replace an editor's matrix (call from a button's on_click)."""
    ss = st.session_state
    ss[f"_{key}_base"] = np.asarray(m, dtype=np.float64)
    ss[f"_{key}_ver"] = ss.get(f"_{key}_ver", 0) + 1
    kept()[key] = ss[f"_{key}_base"]


# -- callbacks ---------------------------------------------------------------------------------------------
def reset_matrices(pairs: tuple) -> None:
    """on_click: reset several editors at once, pairs = ((key, matrix), ...)."""
    for key, m in pairs:
        reset_matrix(key, m)


def quiz_next(key: str, T: int, causal: bool) -> None:
    """on_click: pick another (row, column), 1-based; mostly visible cells, sometimes a masked one."""
    ss = st.session_state
    n = ss.get(f"_{key}_asked", 0) + 1
    ss[f"_{key}_asked"] = n
    rng = np.random.default_rng(n)
    i = int(rng.integers(2 if T > 1 else 1, T + 1))
    j = int(rng.integers(1, (i if causal and rng.random() > 0.2 else T) + 1))
    ss[key] = f"{i},{j}"
    kept()[key] = ss[key]


def flag(key: str) -> None:
    """on_click: set a session flag."""
    st.session_state[key] = True
