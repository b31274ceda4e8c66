"""Streamlit entry: `streamlit run app/main.py` (or `attnlab app`). The navigation groups the pages into
sections (app/navigation.py), always fully expanded."""

from __future__ import annotations

import streamlit as st
from attnlab.app.navigation import APP_ICON, sections
from attnlab.app.url_state import keep_history

from attnlab.data import data_folder

st.set_page_config(page_title="attnlab", page_icon=APP_ICON, layout="wide")
keep_history()
st.navigation({section: [st.Page(data_folder("pages") / f, title=t, url_path=u, default=(u == ""), icon=i)
                         for f, t, u, i in entries] for section, entries in sections().items()},
              expanded=True).run()
