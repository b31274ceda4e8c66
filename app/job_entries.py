"""Long work on the shared models as app.jobs jobs (progress, Cancel, the result kept per key): started on a page's
first request, the same job on every later one. The quick cached entry points are app/state.py's."""

from __future__ import annotations

from collections.abc import Callable

from attnlab.analysis.circuit import find as circuit_
from attnlab.analysis.faithfulness import store as kept_
from attnlab.analysis.probes import context_mixing as mixing_
from attnlab.analysis.probes import patching as patching_
from attnlab.app import state
from attnlab.app.jobs import Job
from attnlab.app.run_settings import run_settings


def job(fn: Callable, name: str, *args, again: bool = False, start: bool = True, **kw) -> Job | None:
    """`fn(lm, *args, on_step=..., **kw)` on the model `name` as a job (app.jobs): started on the first request,
    the same job (running or its kept result) on every later one; `again` restarts a cancelled or failed one;
    `start=False` only looks it up (None when never started)."""
    run = run_settings()
    key = (f"{fn.__module__}.{fn.__qualname__}", run, name.strip(), args, tuple(sorted(kw.items())))
    if not start:
        return state._jobs().get(key)
    lm = state._load(name.strip(), *run)
    return state._jobs().submit(key, lambda on_step: fn(lm, *args, on_step=on_step, **kw), again=again,
                                around=lambda: state.cpu_threads(lm))


def patching_job(name: str, clean: str, corrupt: str, answer: str, wrong: str, again: bool = False) -> Job:
    """state.patching as a job: the sweep in slices of one block of one staircase each."""
    return job(patching_.activation_patching, name, clean, corrupt, answer, wrong, again=again)


def mixing_job(name: str, text: str, src: str | None, method: str, again: bool = False, start: bool = True
               ) -> Job | None:
    """state.context_mixing as a job (value zeroing of a long text: slices of one layer's reruns)."""
    return job(mixing_.of_text, name, text, src, method, again=again, start=start)


def circuit_job(name: str, clean: str, corrupt: str, answer: str, wrong: str, method: str, share: float,
                again: bool = False) -> Job:
    """state.circuit as a job: slices of one batch of path points or one batch of circuit runs."""
    return job(circuit_.find_circuit, name, clean, corrupt, answer, wrong, method=method, share=share, again=again)


def faithfulness_job(name: str, n: int, seed: int, methods: tuple[str, ...], again: bool = False,
                     start: bool = True) -> Job | None:
    """state.faithfulness (ablation off) as a job: slices of one shared pass of integrated gradients or one example."""
    return job(kept_.kept_faithfulness, name, n, seed, methods=methods, ablation=False, again=again, start=start)
