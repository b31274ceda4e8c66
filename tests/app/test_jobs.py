"""Jobs (app.jobs): progress 0 → 1, cancel stops at the next slice, a second request gets the kept result, a
failure is kept as its error; and the point of it all: while the patching sweep runs as a job, another thread's
inference() gets the lock within two slices, where the sweep under the lock made it wait for the whole sweep."""

from __future__ import annotations

import threading
import time

import pytest
from attnlab.analysis.probes.patching import activation_patching
from attnlab.app import state
from attnlab.app.jobs import BusyError, Jobs, SharedLock
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.analysis.interp_models import CORRUPT, STORY


def _slices(n: int, calls: list, pause: float = 0.01):
    """A job function of n slices of `pause` s each; `calls` gets each slice's index as it runs."""
    def fn(on_step):
        for i in range(n):
            calls.append(i)
            time.sleep(pause)
            on_step(i + 1, n)
        return sum(range(n))
    return fn


def test_progress_goes_from_0_to_1_and_the_result_is_kept():
    jobs, calls, seen = Jobs(SharedLock()), [], []
    job = jobs.submit(("sum",), _slices(20, calls))
    while not job.wait(0.005):
        seen.append(job.progress)
    assert job.state == "done" and job.result == 190 and job.progress == 1.0 and job.slices == 20
    assert seen[0] < 0.5 and seen == sorted(seen)
    again = jobs.submit(("sum",), _slices(20, calls))
    assert again is job and len(calls) == 20  # the kept result: nothing recomputed
    assert not jobs.lock.locked()


def test_cancel_stops_at_the_next_slice():
    jobs, calls = Jobs(SharedLock()), []
    job = jobs.submit(("long",), _slices(1_000, calls))
    while len(calls) < 5:
        time.sleep(0.005)
    job.cancel()
    assert job.wait(5) and job.state == "cancelled" and job.result is None
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n < 1_000  # the function is not called again
    assert jobs.submit(("long",), _slices(3, calls)) is job  # kept as cancelled until asked again
    rerun = jobs.submit(("long",), _slices(3, calls), again=True)
    assert rerun is not job and rerun.wait(5) and rerun.result == 3
    assert not jobs.lock.locked()


def test_a_failure_is_kept_as_its_error_and_the_lock_is_free():
    def bad(on_step):
        on_step(1, 2)
        raise InputError("the prompts differ in length")

    jobs = Jobs(SharedLock())
    job = jobs.submit(("bad",), bad)
    assert job.wait(5) and job.state == "failed" and str(job.error) == "the prompts differ in length"
    assert not jobs.lock.locked()


def test_a_job_that_cannot_get_the_lock_fails_busy():
    lock = SharedLock()
    jobs = Jobs(lock, busy_s=0.05)
    with lock:
        job = jobs.submit(("busy",), _slices(2, []))
        assert job.wait(5)
    assert job.state == "failed" and isinstance(job.error, BusyError) and "busy" in str(job.error)


def test_only_the_newest_finished_jobs_are_kept():
    jobs = Jobs(SharedLock(), kept=2)
    for i in range(4):
        assert jobs.submit((i,), _slices(1, [], 0)).wait(5)
    assert jobs.get((0,)) is None and jobs.get((1,)) is None  # the two newer ones (and the 4th) stay
    assert jobs.get((2,)).state == jobs.get((3,)).state == "done"


# -- the class is not blocked ----------------------------------------------------------------------------
def _probe_waits(running: threading.Event, every: float = 0.05) -> list[float]:
    """Seconds each inference() waited for the lock, one request every `every` s while `running` is set."""
    waits = []
    while running.is_set():
        t = time.perf_counter()
        with state.inference():
            waits.append(time.perf_counter() - t)
        time.sleep(every)
    return waits


def test_a_short_request_waits_at_most_two_slices_not_the_whole_sweep(monkeypatch):
    lm = load("lecture-decoder")
    monkeypatch.setattr(state, "BUSY_WAIT_S", 60)
    jobs = Jobs(state._inference_lock(), busy_s=60)

    # before: the sweep under the lock for its whole length
    running, waits = threading.Event(), []
    running.set()
    held = threading.Event()

    def whole():
        with state._inference_lock():  # the lock itself: no pass between blocks, as before jobs
            held.set()
            t = time.perf_counter()
            activation_patching(lm, STORY, CORRUPT, "rabbit", "turtle")
            whole.seconds = time.perf_counter() - t

    t = threading.Thread(target=whole)
    t.start()
    held.wait(10)
    probe = threading.Thread(target=lambda: waits.extend(_probe_waits(running)))
    probe.start()
    t.join()
    running.clear()
    probe.join()
    before = waits[0]

    # after: the same sweep as a job, slices timed from inside
    stamps = []  # (slice start, slice end)

    def fn(on_step):
        start = [time.perf_counter()]

        def step(done, total):
            stamps.append((start[0], time.perf_counter()))
            on_step(done, total)
            start[0] = time.perf_counter()

        return activation_patching(lm, STORY, CORRUPT, "rabbit", "turtle", on_step=step)

    running.set()
    job = jobs.submit(("patching", "test"), fn)
    waits = _probe_waits(running_until(job, running))
    assert job.wait(60) and job.state == "done"
    slice_s = max(b - a for a, b in stamps)
    print(f"sweep {whole.seconds:.3f} s under the lock: a request waited {before:.3f} s; as a job "
          f"({len(stamps)} slices, longest {slice_s:.3f} s): {len(waits)} requests, longest wait {max(waits):.3f} s")
    assert before > 0.5 * whole.seconds  # it waited for (most of) the whole sweep
    assert len(waits) >= 3 and max(waits) < 2 * slice_s
    assert job.result.resid.shape == (4, 34)


def running_until(job, running: threading.Event) -> threading.Event:
    """`running`, cleared when `job` ends."""
    threading.Thread(target=lambda: (job.wait(60), running.clear()), daemon=True).start()
    return running


@pytest.fixture(autouse=True)
def _free_lock():
    yield
    assert not state._inference_lock().locked()
