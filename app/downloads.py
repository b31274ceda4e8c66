"""Downloads: CSV, NPZ and JSON buttons for the numbers a page shows, built only when clicked."""

from __future__ import annotations

import io
import json

import numpy as np
import streamlit as st


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _jsonable(o):
    """`o` with numpy arrays and scalars as lists and numbers, and NaN/±inf as None (strict JSON)."""
    if isinstance(o, np.ndarray):
        return np.where(np.isfinite(o), o, None).tolist() if o.dtype.kind == "f" else o.tolist()
    if isinstance(o, (np.floating,)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, float):
        return o if np.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o


def downloads(name: str, *, csv=None, npz: dict | None = None, json_obj=None) -> None:
    """CSV / NPZ / JSON download buttons for the numbers on the page. The files are built only when a
    button is clicked (deferred data), so a rerun costs nothing; a click does not rerun the page."""
    cols = st.columns(3)
    if csv is not None:
        def csv_data(c=csv):
            return c.to_csv(index=False) if hasattr(c, "to_csv") else c

        cols[0].download_button("⬇ CSV", csv_data, f"{name}.csv", "text/csv", on_click="ignore",
                                key=f"dl-csv-{name}")
    if npz is not None:
        cols[1].download_button("⬇ NPZ", lambda a=npz: _npz_bytes(a), f"{name}.npz", "application/octet-stream",
                                on_click="ignore", key=f"dl-npz-{name}")
    if json_obj is not None:
        cols[2].download_button("⬇ JSON", lambda o=json_obj: json.dumps(_jsonable(o), indent=1, allow_nan=False),
                                f"{name}.json", "application/json", on_click="ignore", key=f"dl-json-{name}")


def matrix_csv(m, q_tokens, k_tokens) -> str:
    """A [q, k] matrix as CSV with token labels (row and column headers 'index:token')."""
    import pandas as pd

    m = np.asarray(m)
    df = pd.DataFrame(m, index=[f"{i}:{t}" for i, t in enumerate(q_tokens[: m.shape[0]])],
                      columns=[f"{j}:{t}" for j, t in enumerate(k_tokens[: m.shape[1]])])
    return df.to_csv(index_label="query\\key")
