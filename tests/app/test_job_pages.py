"""Pages with a job (AppTest): Activation patching shows a progress bar and Cancel while its sweep runs, then
the charts with the sweep's own numbers; a cancelled job says so in one line and offers to run it again; Rollout
scores integrated gradients as a job under its table."""

from __future__ import annotations

import time

import numpy as np
import pytest
from attnlab.analysis.probes import patching
from attnlab.analysis.probes.patching import activation_patching
from attnlab.app import job_entries, job_view, state
from attnlab.app.interp_examples import RETRIEVAL
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page, titled, z_of


@pytest.fixture
def fresh(monkeypatch):
    """No kept jobs, and no wait for a quick result: the page shows the running job at once."""
    state._jobs.clear()
    monkeypatch.setattr(job_view, "QUICK_S", 0.0)
    yield
    for job in list(state._jobs()._jobs.values()):
        job.cancel()
        job.wait(60)
    state._jobs.clear()


def _job():
    (job,) = state._jobs()._jobs.values()
    return job


def _progress(at):
    return [el for el in at.get("progress")]


def test_progress_then_the_result(fresh):
    at = open_page("patching", model="lecture-decoder", pt_example="retrieval", pt_layer=1)
    ok(at)
    assert len(_progress(at)) == 1 and "Patching every layer" in _progress(at)[0].proto.text
    assert at.button(key="pt-job-cancel").label == "Cancel"
    assert not at.get("plotly_chart")
    job = _job()
    assert job.wait(60) and job.state == "done"
    at.run()
    ok(at)
    assert not _progress(at)
    p = activation_patching(load("lecture-decoder"), RETRIEVAL.clean, RETRIEVAL.corrupt, "rabbit", "turtle")
    resid = titled(at, "residual stream entering each layer")
    np.testing.assert_allclose(z_of(resid["data"][0]), 100 * p.resid, atol=1e-3)
    assert job_entries.patching_job("lecture-decoder", RETRIEVAL.clean, RETRIEVAL.corrupt, "rabbit", "turtle") is job


def test_cancel_says_so_and_runs_again(fresh, monkeypatch):
    def slow(lm, *args, on_step, **kw):  # 0.2 s more a slice: the cancel lands mid-sweep
        return activation_patching(lm, *args, on_step=lambda d, t: (time.sleep(0.2), on_step(d, t)), **kw)

    monkeypatch.setattr(patching, "activation_patching", slow)
    at = open_page("patching", model="lecture-decoder", pt_example="retrieval")
    job = _job()
    at.button(key="pt-job-cancel").click().run()
    assert job.wait(60) and job.state == "cancelled" and job.progress < 1
    at.run()
    ok(at)
    assert [w.value for w in at.warning] == [f"Patching every layer, position and head: cancelled at "
                                             f"{100 * job.progress:.0f} %; nothing was kept."]
    at.button(key="pt-job-again").click().run()
    assert _job() is not job
    assert _job().wait(60) and _job().state == "done"
    at.run()
    ok(at)
    assert titled(at, "residual stream entering each layer")


def test_rollout_scores_integrated_gradients_as_a_job(fresh, tmp_path, monkeypatch):
    """The button starts the job: the table stays on the page with an empty row and a progress bar under way;
    when it is done, the row holds the kept report's number."""
    from attnlab.analysis.faithfulness import store as kept_
    from attnlab.app.held_out import IG

    from tests.app.conftest import finish_jobs

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    for fn in (state.faithfulness, state.faithfulness_path, state.ranking_reasons):
        fn.clear()
    at = open_page("rollout", model="lecture-decoder", faith_n=20, timeout=600)
    at.button(key="faith_ig").click().run()
    ok(at)
    assert "Scoring integrated gradients" in _progress(at)[0].proto.text
    (t,) = [d.value for d in at.dataframe if "attnlab name" in d.value.columns]
    assert t.set_index("attnlab name")["top-1 agreement"].isna().sum() == 1  # integrated gradients: not yet
    finish_jobs(at)
    ok(at)
    assert not _progress(at)
    (t,) = [d.value for d in at.dataframe if "attnlab name" in d.value.columns]
    kept = kept_.read_report(kept_.report_path(state.model("lecture-decoder"), 20, 0, methods=IG))
    assert t.set_index("attnlab name").loc["integrated_gradients", "top-1 agreement"] == \
        kept["methods"]["integrated_gradients"]["top1"]
    for fn in (state.faithfulness, state.faithfulness_path, state.ranking_reasons):
        fn.clear()


def test_rollout_integrated_gradients_failing_is_one_line_and_the_table_stays(fresh, tmp_path, monkeypatch):
    from attnlab.analysis.faithfulness import store as kept_
    from attnlab.model.inputs import InputError

    from tests.app.conftest import finish_jobs

    def failing(lm, n, seed, *, methods, ablation, on_step):
        on_step(1, 2)
        raise InputError("integrated gradients failed on purpose")

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kept_, "kept_faithfulness", failing)
    for fn in (state.faithfulness, state.faithfulness_path, state.ranking_reasons):
        fn.clear()
    at = finish_jobs(open_page("rollout", model="lecture-decoder", faith_n=20, timeout=600).button(key="faith_ig")
                     .click().run())
    assert not at.exception
    from attnlab.app.frame import error_message

    assert [m.value for m in [*at.warning, *at.error] if "on purpose" in m.value] == [
        error_message(InputError("integrated gradients failed on purpose"))[1]]  # one line, as every page says it
    (t,) = [d.value for d in at.dataframe if "attnlab name" in d.value.columns]
    assert t.set_index("attnlab name")["top-1 agreement"].isna().sum() == 1  # the other methods' rows stay
    for fn in (state.faithfulness, state.faithfulness_path, state.ranking_reasons):
        fn.clear()


def test_rollout_value_zeroing_of_a_long_text_runs_when_asked(fresh, monkeypatch):
    """Past QUICK_FLOPS (here: every text) value zeroing waits for its button, then runs as a job; its row is then
    the analysis' last-layer row."""
    from attnlab.analysis.probes.context_mixing import value_zeroing
    from attnlab.app import mixing_view

    from tests.app.conftest import finish_jobs

    monkeypatch.setattr(mixing_view, "QUICK_FLOPS", 0.0)
    text = "the cat sat on the mat and the cat ran"
    at = open_page("rollout", model="random-decoder", text=text, query=4)
    ok(at)
    assert "value zeroing" not in titled(at, "Which tokens matter")["data"][0]["y"]
    assert "attention norm" in titled(at, "Which tokens matter")["data"][0]["y"]  # cheap: with the page
    assert any(c.value.startswith("Value zeroing reruns every block once per token: these") for c in at.caption)
    finish_jobs(at.button(key=mixing_view.ASK).click().run())
    ok(at)
    names = titled(at, "Which tokens matter")["data"][0]["y"]
    raw = z_of({"z": titled(at, "Which tokens matter")["data"][0]["customdata"]})
    lm = load("random-decoder")
    np.testing.assert_allclose(raw[names.index("value zeroing")], value_zeroing(lm, lm.encode(text))[-1, 4], atol=1e-9)
    assert not [b for b in at.button if b.key == mixing_view.ASK]
