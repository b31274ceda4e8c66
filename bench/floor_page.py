"""The floors of `attnlab bench --browser`: a Streamlit page with one small Plotly heatmap and nothing else,
served with the app's own settings, or (`?plain=1`) with one line of text. Its first chart is as fast as a
Plotly chart in Streamlit gets on this machine (the browser loads and starts plotly.js before drawing
anything), its text as fast as any Streamlit page shows anything; the app's pages are compared to both."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

if st.query_params.get("plain"):
    with st.container(key="fig-floor"):
        st.markdown("attnlab floor")
else:
    z = np.random.default_rng(0).random((20, 20))  # [20, 20]
    st.plotly_chart(go.Figure(go.Heatmap(z=z)), key="fig-floor")
