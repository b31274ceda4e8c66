"""Columns that wrap: side by side while each gets `min_width` pixels, else as many per row as fit (one under
the other on a narrow screen), every column the same width. Charts in them keep the size their labels need at
1400 px and at 1024 px, where plain st.columns would squeeze them."""

from __future__ import annotations

import streamlit as st
from attnlab.app.figures.style import MAIN_PX

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


# -- the width a chart gets ----------------------------------------------------------------------------------
GAP_REM = {"small": 1, "medium": 2, "large": 4}  # st.columns' gaps


def column_px(spec, present: bool, gap: str = "small", min_width: int = 0) -> list[int]:
    """The width in px of each column of st.columns(spec, gap=gap) (or of wrapping_columns(spec, …, min_width)
    when `min_width`) in the main column, at the narrowest window of the mode (see MAIN_PX) or any wider one:
    the least width a column gets there."""
    weights = [1] * spec if isinstance(spec, int) else list(spec)
    main, n = MAIN_PX[present], len(weights)
    if min_width:  # as many a row as get min_width, all the same width
        per_row = max(1, min(n, (main + GAP_PX) // (min_width + GAP_PX)))
        px = int((main - (per_row - 1) * GAP_PX) / per_row)
        return [px if per_row == n else min(px, min_width)] * n  # a wider window fits one more a row, each min_width
    room = main - (n - 1) * GAP_REM[gap] * (19 if present else 16)
    return [int(room * w / sum(weights)) for w in weights]
