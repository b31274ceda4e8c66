"""Streamlit entry: `streamlit run app/main.py` (or `attnlab app`)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # under `streamlit run`, sys.path[0] is app/
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app.navigation import PAGES  # noqa: E402

st.set_page_config(page_title="attnlab", page_icon="🔍", layout="wide")
st.navigation([st.Page(ROOT / "pages" / f, title=t, url_path=u, default=(u == ""), icon=i)
               for f, t, u, i in PAGES]).run()
