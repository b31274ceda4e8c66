"""Streamlit entry: `streamlit run app/main.py` (or `attnlab app`). The navigation groups the pages into
sections (app/navigation.py), always fully expanded."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # under `streamlit run`, sys.path[0] is app/
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app.navigation import APP_ICON, sections  # noqa: E402
from app.url_state import keep_history  # noqa: E402

st.set_page_config(page_title="attnlab", page_icon=APP_ICON, layout="wide")
keep_history()
st.navigation({section: [st.Page(ROOT / "pages" / f, title=t, url_path=u, default=(u == ""), icon=i)
                         for f, t, u, i in entries] for section, entries in sections().items()},
              expanded=True).run()
