"""Reliability (issue 9): ≥ 8 threads capturing at once on the shared models, checked against a single-threaded
reference; a held inference lock gives "busy, retry" after a bounded wait, never a hung page."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from attnlab.app import state
from attnlab.model.registry import RANDOM, bundled_names

from tests.app.conftest import open_page, specs
from tests.app.reliability import (
    errors,
    no_exception,
    report,
    vocab_words,
)

# -- 3. many sessions at once on the shared models ---------------------------------------------------------
CONCURRENT = ["lecture-decoder", "lecture-encoder", "lecture-encdec", "random-decoder", "random-encdec"]


def _job(i: int, r: int) -> tuple[str, str, str | None, str]:
    """Thread i, round r: a model, a text of its own length, a source text, a backend."""
    name = [m for m in CONCURRENT if m in bundled_names() or m in RANDOM][(i + r) % len(CONCURRENT)]
    words = vocab_words(name)
    n = 3 + i + 2 * r  # every job a different length: a mixed-up result cannot have the right shape
    text = " ".join(words[(7 * i + 3 * r + 5 * k) % len(words)] for k in range(n))
    src = " ".join(words[(11 * i + k) % len(words)] for k in range(4 + i)) if name.endswith("encdec") else None
    return name, text, src, ("eager", "sdpa")[(i + r) % 2]


def test_concurrent_captures_keep_their_own_tokens_and_patterns():
    n_threads, rounds = 8, 4
    jobs = {(i, r): _job(i, r) for i in range(n_threads) for r in range(rounds)}
    ref = {}
    for key, (name, text, src, backend) in jobs.items():  # single-threaded reference
        run = state.model(name).run(text, src, backend=backend)
        ref[key] = (list(run.tokens), {s: r.pattern() for s, r in run.records.items()})
    barrier = threading.Barrier(n_threads)
    failures: list[str] = []
    done = [0]

    def check(key, tokens, patterns) -> None:
        want_tokens, want = ref[key]
        if tokens != want_tokens:
            failures.append(f"{key}: tokens {tokens[:5]}… != {want_tokens[:5]}…")
        for site, p in want.items():
            got = patterns[site]
            if got.shape != p.shape or not np.allclose(got, p, atol=1e-6):
                failures.append(f"{key}: {site} pattern differs")

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            for r in range(rounds):
                name, text, src, backend = jobs[(i, r)]
                if r % 2 == 0:  # the pages' path: the cached capture
                    cap = state.capture(name, text, src, backend)
                    check((i, r), cap.tokens, {s: rec.pattern() for s, rec in cap.records.items()})
                else:  # the shared LoadedModel under the same inference lock
                    lm = state.model(name)
                    with state.inference():
                        run = lm.run(text, src, backend=backend)
                    check((i, r), list(run.tokens), {s: r.pattern() for s, r in run.records.items()})
                done[0] += 1
        except Exception as e:  # noqa: BLE001 — every error counts
            failures.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wall = time.perf_counter() - t0
    assert not any(t.is_alive() for t in threads), "a capture thread hung"
    report(concurrency={"threads": n_threads, "captures": done[0], "seconds": round(wall, 2),
                        "captures_per_s": round(done[0] / wall, 1), "errors": len(failures),
                        "models": sorted({j[0] for j in jobs.values()})})
    assert failures == []
    assert done[0] == n_threads * rounds


# -- 4. busy: a held inference lock gives "busy, retry" after a bounded wait ---------------------------------
@pytest.fixture
def held_lock(monkeypatch):
    monkeypatch.setattr(state, "BUSY_WAIT_S", 0.3)
    lock = state._inference_lock()
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert held.wait(10)
    yield release
    release.set()
    t.join(10)


@pytest.mark.parametrize("page", [None, "heatmaps"])
def test_busy_server_says_busy_retry_instead_of_hanging(held_lock, page):
    state.model("random-decoder")  # loaded before the lock is held (a load waits for the lock too)
    text = f"busy {page} {time.time_ns()}"  # never cached
    t0 = time.perf_counter()
    at = open_page(page, timeout=30, model="random-decoder", text=text)
    waited = time.perf_counter() - t0
    no_exception(at)
    busy = [w.value for w in at.warning if "busy" in w.value]
    assert len(busy) == 1 and busy[0].startswith("The server is busy with other requests (waited ")
    assert busy[0].endswith("Wait a few seconds and retry.")
    assert waited < 20 and not specs(at)
    held_lock.set()  # the lock is free again: the same page, rerun, draws
    time.sleep(0.05)
    at.run()
    no_exception(at)
    assert not [w for w in at.warning if "busy" in w.value] and not errors(at) and specs(at)
