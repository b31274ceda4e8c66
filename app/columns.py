"""Columns that wrap: side by side while each gets `min_width` pixels, else as many per row as fit (one under
the other on a narrow screen), every column the same width. Charts in them keep the size their labels need at
1400 px and at 1024 px, where plain st.columns would squeeze them."""

from __future__ import annotations

import streamlit as st

GAP_PX = 16  # the gap between columns (st.columns' "small" gap is 1rem)


def wrapping_columns(n: int, key: str, min_width: int) -> list:
    """`n` columns in a container keyed `key`, laid out on a CSS grid of columns at least `min_width` px wide."""
    st.html(f"""<style>
.st-key-{key} > [data-testid="stLayoutWrapper"] > [data-testid="stHorizontalBlock"] {{
  display: grid !important; gap: {GAP_PX}px !important;
  grid-template-columns: repeat(auto-fit, minmax(min({int(min_width)}px, 100%), 1fr)); }}
.st-key-{key} > [data-testid="stLayoutWrapper"] > [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] {{
  width: auto !important; min-width: 0 !important; max-width: none !important; flex: none !important; }}
</style>""")
    with st.container(key=key):
        return st.columns(n, gap="small")
