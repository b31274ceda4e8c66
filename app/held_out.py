"""Rollout's held-out table: how often each method's top token is an answer's known source, over examples the
model was not trained on (analysis.faithfulness.benchmark), kept on disk per model (analysis.faithfulness.store).

Every method but integrated gradients takes seconds on a model's first visit. Integrated gradients integrates
the gradient over 9–513 rows per example (about 30 on the lecture models: seconds for 40 examples on a CPU,
far more on a large model), so it is scored when the button asks for it, once per model, as a job (app.jobs: a
progress bar and Cancel, other sessions' requests in between its slices): from then on its row is read from disk
like the rest."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from attnlab.analysis.faithfulness import store as kept_
from attnlab.analysis.faithfulness.benchmark import METHODS
from attnlab.analysis.probes.ig_rule import FIRST_PANELS, MAX_STEPS
from attnlab.app import job_entries, state
from attnlab.app.frame import show_error
from attnlab.app.job_view import job_result

IG = ("integrated_gradients",)
FAST = tuple(m for m in METHODS if m not in IG)
ASK = "faith_ig"  # the button's key: True in the run its press starts


def held_out(name: str, n: int, seed: int) -> dict:
    """The report of every method over `n` held-out examples: the full report when one is kept; else every
    method but integrated gradients (computed, or read back), joined with integrated gradients' own report when
    it is kept or the button asks for it now."""
    full = state.kept_faithfulness(name, n, seed, ablation=False)
    if full is not None:
        return full
    ig = state.kept_faithfulness(name, n, seed, methods=IG, ablation=False)
    if ig is None and st.session_state.get(ASK):
        job_entries.faithfulness_job(name, n, seed, IG, again=True)  # the button restarts a cancelled or failed one
    if ig is None and job_entries.faithfulness_job(name, n, seed, IG, start=False):
        try:
            ig = job_result(lambda again: job_entries.faithfulness_job(name, n, seed, IG, again=again),
                            "Scoring integrated gradients", "faith-job", stop=False)  # None while it runs
        except Exception as e:  # noqa: BLE001 — its one line; the other methods' rows stay
            show_error(e)
    return kept_.joined(state.faithfulness(name, n, seed, methods=FAST, ablation=False), ig)


def table(report: dict, labels: dict[str, str]) -> pd.DataFrame:
    """One row per method of the benchmark, in its order; a method not scored yet has an empty row."""
    scored = report["methods"]
    methods = [m for m in METHODS if m in scored or m in IG]
    return pd.DataFrame([{"method": labels.get(m, m), "attnlab name": m,
                          "top-1 agreement": scored[m]["top1"] if m in scored else None,
                          "examples": scored[m]["n"] if m in scored else None} for m in methods]
                        ).astype({"top-1 agreement": "float64", "examples": "Int64"})  # whole counts, or empty


def ask(report: dict, n: int) -> None:
    """Under the table, while integrated gradients is not scored: what it costs, and the button that scores it."""
    if IG[0] in report["methods"]:
        return
    st.caption(f"Integrated gradients is not scored on these {n} examples yet: it takes {2 * FIRST_PANELS + 1}–"
               f"{MAX_STEPS + 1} forward and backward rows per example (where the logit moves fast along the path, "
               "more), once per model; afterwards its row is kept with the others.")
    st.button("Score integrated gradients", key=ASK, icon=":material/functions:")
