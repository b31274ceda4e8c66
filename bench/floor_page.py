"""The floor of `attnlab bench --browser`: a Streamlit page with one small Plotly heatmap and nothing else,
served with the app's own settings. Its first chart is as fast as a Plotly chart in Streamlit gets on this
machine (the browser loads and starts plotly.js before drawing anything); the app's pages are compared to it."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

z = np.random.default_rng(0).random((20, 20))  # [20, 20]
st.plotly_chart(go.Figure(go.Heatmap(z=z)), key="fig-floor")
