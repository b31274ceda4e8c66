"""A page with one slow job (40 slices of 0.1 s) drawn by app.job_view: the browser test's probe of the polling."""

import time

import streamlit as st
from attnlab.app import job_view
from attnlab.app.jobs import Jobs, SharedLock


@st.cache_resource
def jobs() -> Jobs:
    return Jobs(SharedLock())


def slow(on_step):
    for i in range(40):
        time.sleep(0.1)
        on_step(i + 1, 40)
    return sum(range(40))


key = st.query_params.get("key", "a")
job_view.QUICK_S = 0.0
result = job_view.job_result(lambda again: jobs().submit((key,), slow, again=again), "Counting slowly", "probe")
st.markdown(f"result {result}")
