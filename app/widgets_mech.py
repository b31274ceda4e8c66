"""Widgets of the mechanics pages: a page that needs a kind of model, editable matrices kept in the URL,
and the PASS/FAIL verdict table of `attnlab check`. Built on app/widgets.py (URL state, presets)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from app import state
from app import widgets as W

_SWITCH = "_mech_switch"  # the model to switch to at the start of the next run
_SWITCHED = "_mech_switched"  # (from, to): say so once


def default_for(archs: tuple[str, ...]) -> str:
    """The bundled lecture model of the first wanted kind, else the matching random model."""
    from model.registry import bundled_names

    names = {"decoder": "decoder", "encoder": "encoder", "encdec": "encdec"}
    for a in archs:
        if f"lecture-{names[a]}" in bundled_names():
            return f"lecture-{names[a]}"
    return f"random-{names[archs[0]]}"


def require_arch(archs: tuple[str, ...], why: str) -> W.Inputs:
    """W.inputs(), but if the chosen model is not one of `archs`, switch to the default model of that
    kind (a bundled lecture model when present) and rerun; the page then says what happened."""
    ss = st.session_state
    target = ss.pop(_SWITCH, None)
    if target is not None:
        ss["model"] = target[1]
        W.reset_positions()
        W._apply_preset(target[1], None)  # the new model's first preset
        ss[_SWITCHED] = target
    inp = W.inputs()
    if inp.arch not in archs:
        ss[_SWITCH] = (inp.model, default_for(archs))
        st.rerun()
    switched = ss.pop(_SWITCHED, None)
    if switched is not None:
        st.info(f"This page {why}, so it switched from **{switched[0]}** to **{switched[1]}**.", icon=":material/swap_horiz:")
    return inp


# -- editable matrices, kept in the URL ---------------------------------------------------------------
def encode_matrix(m) -> str:
    """'1,0,-1;2,0.5,1' (rows by ';', up to 4 significant digits)."""
    return ";".join(",".join(f"{v:.4g}" for v in row) for row in np.asarray(m, dtype=np.float64))


def decode_matrix(s: str, max_side: int = 12) -> np.ndarray:
    rows = [[float(x) for x in r.split(",")] for r in s.strip().split(";") if r.strip()]
    a = np.array(rows, dtype=np.float64)
    if a.ndim != 2 or not 1 <= a.shape[0] <= max_side or not 1 <= a.shape[1] <= max_side or not np.isfinite(a).all():
        raise ValueError("not a finite matrix")
    return a


def matrix_editor(label: str, key: str, default, *, row_labels, col_labels, where=None, shape=None,
                  help: str | None = None) -> np.ndarray:
    """An st.data_editor over a small matrix. Its value lives in the URL as `key=1,0;0,1`, seeded (in this
    order) from the URL, from this session, or from `default`; `reset_matrix(key, m)` replaces it."""
    ss = st.session_state
    base = f"_{key}_base"
    want = tuple(shape) if shape is not None else np.asarray(default).shape
    if base not in ss or ss[base].shape != want:
        value = np.asarray(default, dtype=np.float64)
        raw = st.query_params.get(key) if W.url_active() else None
        kept = ss.get(W.KEEP, {}).get(key)
        for cand in (raw, kept):
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
        where.markdown(label, help=help)
    edited = where.data_editor(df, key=f"{key}-editor-{ss[f'_{key}_ver']}", num_rows="fixed", column_config=cfg,
                               width="content")
    m = edited.to_numpy(dtype=np.float64, na_value=np.nan)
    if not np.isfinite(m).all():
        raise ValueError(f"every cell of {label or key} needs a number")
    ss[base] = m  # the edits survive leaving the page (the editor's own state does not)
    ss.setdefault(W.KEEP, {})[key] = m
    ss.setdefault(W.URL, {})[key] = encode_matrix(m)
    return m


def reset_matrix(key: str, m) -> None:
    """Replace an editor's matrix (call from a button's on_click)."""
    ss = st.session_state
    ss[f"_{key}_base"] = np.asarray(m, dtype=np.float64)
    ss[f"_{key}_ver"] = ss.get(f"_{key}_ver", 0) + 1
    ss.setdefault(W.KEEP, {})[key] = ss[f"_{key}_base"]


# -- verdicts --------------------------------------------------------------------------------------------
def check_rows(report: dict, names) -> list[dict]:
    """The named checks of an `attnlab check` report, in that order."""
    by = {c["name"]: c for c in report["checks"]}
    return [by[n] for n in names if n in by]


def verdict_table(rows: list[dict], where=None) -> pd.DataFrame:
    """PASS/FAIL per check with its value and tolerance (the same numbers `attnlab check` prints)."""
    where = where or st
    df = pd.DataFrame({
        "check": [c["name"] for c in rows],
        "verdict": ["✓ PASS" if c["passed"] else "✗ FAIL" for c in rows],
        "value": [c["value"] for c in rows],
        "tolerance": [c["tolerance"] for c in rows],
        "note": [c.get("note", "") for c in rows],
    })
    where.dataframe(df, hide_index=True, width="stretch", column_config={
        "value": st.column_config.NumberColumn("max |Δ| (or count)", format="%.3e"),
        "tolerance": st.column_config.NumberColumn("tolerance", format="%.0e")})
    return df


def scale_note(rows: list[dict], scale: dict, where=None) -> None:
    """Read each max |Δ| against the size of the numbers compared (float32 keeps ~7 significant digits)."""
    where = where or st
    big = scale["logits"] if scale.get("logits") else scale["hidden"]
    rel = [f"{c['name']}: {c['value'] / big:.1e}" for c in rows  # the checks that compare outputs
           if c["value"] is not None and ("logits" in c["name"] or c["name"].startswith("eager_vs")) and big]
    if rel:
        what = "logits" if scale.get("logits") else "hidden states"
        where.caption(f"For scale: the {what} of this input reach ±{big:.3g}, so relative to them the differences are "
                      f"{'; '.join(rel)}. float32 resolves about 7 significant digits (ε = {scale['eps']:.1e}): "
                      "differences of a few ε relative are rounding, not a bug; a fixed absolute tolerance can "
                      "fail on large logits for that reason alone.")


def verdict_banner(passed: bool, ok: str, bad: str, where=None) -> None:
    where = where or st
    (where.success if passed else where.error)(ok if passed else bad, icon=":material/check_circle:" if passed else ":material/cancel:")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def model_shape(name: str) -> tuple[int, int]:
    """(heads, d_head) of a model, for live timings at its own size."""
    info = state.model_info(name)
    return int(info["heads"]), int(info["d_model"]) // int(info["heads"])


# -- callbacks (module functions: the session state must stay picklable) ------------------------------------
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
    ss.setdefault(W.KEEP, {})[key] = ss[key]


def flag(key: str, value=True) -> None:
    """on_click: set a session flag."""
    st.session_state[key] = value
