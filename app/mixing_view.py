"""Context mixing on a page: the layers' matrices of a method, at once when cheap, else as a job a button starts
(value zeroing reruns every block once per token: seconds on the lecture models, a minute on SmolLM2 at 95 tokens)."""

from __future__ import annotations

import streamlit as st
from attnlab.analysis.probes.context_mixing import Mixing, zeroing_flops
from attnlab.app import job_entries, state
from attnlab.app.job_view import job_result

QUICK_FLOPS = 1e11  # value zeroing below this runs with the page (about 2 s on one CPU core); above it, on request
CPU_FLOPS = 6e10  # what one CPU core does per second here on value zeroing (SmolLM2, one thread: 49e9 at 9 tokens,
# 71e9 at 25: 1.39e11 in 1.96 s)
ASK = "mixing_ask"  # the button's key: True in the run its press starts


def mixing_layers(name: str, text: str, src: str | None, method: str, t: int, s: int | None = None
                  ) -> Mixing | None:
    """[L, T, T] of `method` on the text of `t` tokens (an encoder–decoder: EncDecMixing, its source of `s` tokens);
    None while its job runs or until the button asks for it."""
    lm = state.model(name)
    if method != "value_zeroing" or lm.device != "cpu" or zeroing_flops(lm, t, s) <= QUICK_FLOPS:
        return state.context_mixing(name, text, src, method)
    if st.session_state.get(ASK):
        job_entries.mixing_job(name, text, src, method, again=True)  # the button restarts a cancelled or failed one
    if job_entries.mixing_job(name, text, src, method, start=False) is not None:
        return job_result(lambda again: job_entries.mixing_job(name, text, src, method, again=again),
                          "Value zeroing", "mixing-job", stop=False)
    these = f"{s} source and {t} target tokens" if lm.reads_source else f"{t} tokens"
    st.caption(f"Value zeroing reruns every block once per token: these {these} take about "
               f"{zeroing_flops(lm, t, s) / CPU_FLOPS:.0f} s on this server's CPU, so it runs when asked (kept after).")
    st.button("Compute value zeroing", key=ASK, icon=":material/functions:")
    return None
