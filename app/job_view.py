"""A job on a page (app.jobs): its result when it is done; while it runs, a progress bar and Cancel (the page
stops there and polls); a cancelled job one line and Run again; a failed one its error in one line (page frame)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st
from attnlab.app.jobs import Job

QUICK_S = 3.0  # s: a job that ends within this shows its result at once, without a progress bar
POLL_S = 0.5  # how often the progress bar reads the job


def job_result(start: Callable[[bool], Job], what: str, key: str, stop: bool = True) -> Any:
    """The result of `start(again)`'s job, or the page stops here while it runs or after it was cancelled
    (`stop=False`: None, and the page goes on). `what`: the work in a few words ("Patching every layer,
    position and head"); `key`: the widgets' prefix."""
    job = start(False)
    job.wait(QUICK_S)
    if job.state == "done":
        return job.result
    if job.state == "failed":
        raise job.error  # the page frame shows it in one line
    if job.state == "cancelled":
        st.warning(f"{what}: cancelled at {100 * job.progress:.0f} %; nothing was kept.")
        if st.button("Run it again", key=f"{key}-again"):
            start(True)
            st.rerun()
    else:
        _progress(job, what, key)
    if stop:
        st.stop()
    return None


@st.fragment(run_every=POLL_S)
def _progress(job: Job, what: str, key: str) -> None:
    if job.state != "running":
        st.rerun(scope="app")
    state = "cancelling…" if job.cancelling else f"{100 * job.progress:.0f} %"
    st.progress(job.progress, text=f"{what}: {state} (other requests go in between; it is kept when done)")
    if st.button("Cancel", key=f"{key}-cancel", disabled=job.cancelling):
        job.cancel()
        st.rerun(scope="app")
