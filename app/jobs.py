"""Long computations as jobs that never hold the class: each runs in a background thread, in slices that take the
inference lock and give it back between them and between two blocks of any forward pass in them (every request
waiting then goes first), with its progress, a cancel that stops it at its next slice, and its result kept per
key so a second request is instant.

A job's function is `fn(on_step) -> result`; the analysis calls `on_step(done, total)` after each slice
(e.g. analysis.probes.patching: one block of one staircase). No Streamlit here: app.job_view draws a job.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from attnlab.model import budget, hooks


class BusyError(RuntimeError):
    """The inference lock was not free within the server's wait."""


class Cancelled(Exception):
    """A job stopped at a slice boundary because it was cancelled."""


class SharedLock:
    """The process-wide inference lock, counting the requests that wait for it. A request (`acquire()`) goes before
    background work (`acquire(background=True)`: a job's next slice, a long forward pass's next block after
    `pass_on`), which waits while requests do, for at most DEFER_S at a time, so neither starves."""

    DEFER_S = 1.0  # the longest a background acquire lets newer requests go first before it takes the lock

    def __init__(self):
        self._lock, self._count, self._waiting, self._requests = threading.Lock(), threading.Lock(), 0, 0

    def acquire(self, timeout: float = -1, background: bool = False) -> bool:
        with self._count:
            self._waiting += 1
            self._requests += not background
        try:
            if not background:
                return self._lock.acquire(timeout=timeout)
            t0 = time.monotonic()
            while True:
                left = -1 if timeout < 0 else max(0.0, t0 + timeout - time.monotonic())
                if not self._lock.acquire(timeout=left):
                    return False
                if not self._requests or time.monotonic() - t0 >= self.DEFER_S:
                    return True
                self._lock.release()  # a request waits: it goes first
                time.sleep(0.002)
        finally:
            with self._count:
                self._waiting -= 1
                self._requests -= not background

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def waiting(self) -> int:
        return self._waiting

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def pass_on(self, timeout: float) -> None:
        """Release, let every request that waits now take the lock first (for up to `timeout` s), take it back as
        background work; BusyError when it is not free again within `timeout`."""
        self.release()
        end = time.monotonic() + timeout
        while self._waiting and time.monotonic() < end:
            time.sleep(0.001)
        if not self.acquire(timeout=timeout, background=True):
            raise BusyError(f"The server stayed busy with other requests for {timeout:.0f} s; this run stopped. "
                            "Run it again.")


@dataclass(eq=False)
class Job:
    """One long computation: state "running", "done", "cancelled" or "failed"; progress 0 → 1."""
    key: tuple
    state: str = "running"
    progress: float = 0.0
    slices: int = 0
    result: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)

    def cancel(self) -> None:
        """Stop at the next slice (a finished job stays as it is)."""
        self._cancel.set()

    @property
    def cancelling(self) -> bool:
        return self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` s for the job to end; True if it has."""
        return self._ended.wait(timeout)


class Jobs:
    """The server's jobs by key; when one starts, the oldest finished ones go so that `kept` remain with it."""

    def __init__(self, lock: SharedLock, kept: int = 16, busy_s: float = 20.0):
        self.lock, self.kept, self.busy_s = lock, kept, busy_s
        self._jobs: OrderedDict[tuple, Job] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, key: tuple) -> Job | None:
        return self._jobs.get(key)

    def submit(self, key: tuple, fn: Callable[[Callable[[int, int], None]], Any], *, again: bool = False,
               around: Callable[[], AbstractContextManager] = nullcontext) -> Job:
        """The job under `key`: the running or finished one (a cancelled or failed one too, unless `again`),
        else `fn(on_step)` started in a thread. `around()` is entered in each slice while the lock is held."""
        with self._guard:
            job = self._jobs.get(key)
            if job is not None and (job.state in ("running", "done") or not again):
                self._jobs.move_to_end(key)
                return job
            job = self._jobs[key] = Job(key)
            done = [k for k, j in self._jobs.items() if j.state != "running" and k != key]
            for k in done[:max(0, len(done) - self.kept + 1)]:  # with the new one, `kept` in all
                del self._jobs[k]
        threading.Thread(target=self._run, args=(job, fn, around), daemon=True, name=f"job {key[0]}").start()
        return job

    def _run(self, job: Job, fn: Callable, around: Callable[[], AbstractContextManager]) -> None:
        t0, held, ctx = time.perf_counter(), False, None

        def enter():
            nonlocal held, ctx
            if not self.lock.acquire(timeout=self.busy_s, background=True):
                raise BusyError(f"The server is busy with other requests (waited {self.busy_s:.0f} s). Run it again.")
            held, ctx = True, around()
            ctx.__enter__()

        def on_step(done: int, total: int) -> None:
            nonlocal held, ctx
            job.progress, job.slices = min(1.0, done / max(total, 1)), job.slices + 1
            if job.cancelling:
                raise Cancelled
            ctx.__exit__(None, None, None)
            held = False
            self.lock.pass_on(self.busy_s)
            held, ctx = True, around()
            ctx.__enter__()
            if job.cancelling:
                raise Cancelled

        def between_steps(done: int, total: int) -> None:
            """Inside a slice, between two blocks of a forward pass: requests waiting now go first."""
            nonlocal held
            if self.lock.waiting():
                with budget.paused():
                    held = False
                    self.lock.pass_on(self.busy_s)
                    held = True

        try:
            enter()
            with hooks.between_steps(between_steps), budget.backend_choice(None):  # a page's job: no backend to pick
                job.result = fn(on_step)
            job.progress, job.state = 1.0, "done"
        except Cancelled:
            job.state = "cancelled"
        except Exception as e:  # noqa: BLE001 — the page shows it in one line
            job.error, job.state = e, "failed"
        finally:
            if held:
                ctx.__exit__(None, None, None)
                self.lock.release()
            job.seconds = time.perf_counter() - t0
            job._ended.set()
