"""One long forward pass never holds the class: under state.inference() a forward pass gives the lock to waiting
requests between two blocks (model.hooks.between_steps) and gets the same logits; its memory is set aside
meanwhile (model.budget.paused); a request goes before background work (a job's slice, a paused pass), which
waits at most SharedLock.DEFER_S."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from attnlab.app import state
from attnlab.app.jobs import SharedLock
from attnlab.model import budget, hooks
from attnlab.model.registry import load


@pytest.fixture(scope="module")
def lm():
    return load("lecture-decoder")


def test_a_stack_calls_between_steps_after_each_block_and_only_inside_the_block(lm):
    seen = []
    with hooks.between_steps(lambda done, total: seen.append((done, total))):
        lm.run("the cat sat on the mat")
    n = lm.cfg.n_layers
    assert seen == [(i, n) for i in range(1, n + 1)]
    lm.run("the cat sat on the mat")  # outside the block: nothing called
    assert len(seen) == n


def test_a_request_gets_the_lock_between_two_blocks_of_a_forward_pass_and_the_pass_is_unchanged(lm):
    text = "the cat sat on the mat and the dog ran after the ball " * 2
    alone = lm.forward(lm.encode(text)).logits
    order, first_block, slow = [], threading.Event(), {}

    def long_pass():
        with state.inference():
            server = hooks._BETWEEN.get()  # what inference() calls between two blocks

            def between(done, total):  # a block that takes a while, so a request arrives meanwhile
                order.append(f"block {done}")
                first_block.set()
                time.sleep(0.05)
                server(done, total)

            with hooks.between_steps(between):
                slow["logits"] = lm.forward(lm.encode(text)).logits
        order.append("pass ended")

    def request():
        first_block.wait(10)
        with state.inference():
            order.append("request")

    threads = [threading.Thread(target=long_pass), threading.Thread(target=request)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert order.index("request") < order.index("pass ended"), order
    assert order.index("request") < len(order) - 2  # before the last block, not after the pass
    np.testing.assert_allclose(slow["logits"], alone, rtol=0, atol=1e-6)


def test_a_request_goes_before_background_work():
    lock, got = SharedLock(), []
    lock.acquire()
    bg = threading.Thread(target=lambda: (lock.acquire(background=True), got.append("background"), lock.release()))
    bg.start()
    time.sleep(0.05)  # the background acquire waits first
    fg = threading.Thread(target=lambda: (lock.acquire(), got.append("request"), time.sleep(0.02), lock.release()))
    fg.start()
    time.sleep(0.05)
    lock.release()
    fg.join(5)
    bg.join(5)
    assert got == ["request", "background"]


def test_background_work_waits_for_requests_at_most_defer_s():
    lock, stop, t_got = SharedLock(), threading.Event(), []

    def requests():  # a request always waiting: without the bound, background work would starve
        while not stop.is_set():
            with lock:
                time.sleep(0.005)

    threads = [threading.Thread(target=requests) for _ in range(3)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    assert lock.acquire(timeout=10, background=True)
    t_got.append(time.monotonic() - t0)
    lock.release()
    stop.set()
    for t in threads:
        t.join(5)
    assert SharedLock.DEFER_S * 0.9 <= t_got[0] <= SharedLock.DEFER_S + 1.0, t_got


def test_a_paused_pass_sets_its_need_aside_from_other_threads_allowance(monkeypatch):
    monkeypatch.setattr(budget, "rss_bytes", lambda: 1_000_000_000)
    monkeypatch.setattr(budget, "available_bytes", lambda device=None: 100 * 10**9)
    old = budget.set_budget(budget.Budget(max_bytes=5 * 10**9))
    try:
        before = budget.allowance()
        inside, release = threading.Event(), threading.Event()
        seen = {}

        def paused_pass():
            budget._NEED.set(1_500_000_000)  # what check_forward records for this thread's pass
            with budget.paused():
                seen["own"] = budget.allowance()  # its own need is not set aside from itself
                inside.set()
                release.wait(5)

        t = threading.Thread(target=paused_pass)
        t.start()
        inside.wait(5)
        during = budget.allowance()
        release.set()
        t.join(5)
        assert (before, during, seen["own"], budget.allowance()) == (
            4 * 10**9, 2_500_000_000, 4 * 10**9, 4 * 10**9)
    finally:
        budget.set_budget(old)


def test_check_forward_records_the_need_of_this_threads_pass(lm):
    budget.check_forward(lm.name, lm.cfg, 40, torch.float32, "eager")
    assert budget._NEED.get() == budget.need_bytes(lm.cfg, 40, torch.float32, "eager", "run")


@pytest.fixture(autouse=True)
def _free_lock():
    yield
    assert not state._inference_lock().locked()


def test_a_job_gives_the_lock_to_a_request_inside_a_slice_between_two_blocks(lm):
    from attnlab.app.jobs import Jobs

    lock = SharedLock()
    jobs, order, first_block = Jobs(lock, busy_s=10), [], threading.Event()

    def fn(on_step):  # one slice: one forward pass whose blocks take a while
        server = hooks._BETWEEN.get()  # what the job calls between two blocks

        def between(done, total):
            order.append(f"block {done}")
            first_block.set()
            time.sleep(0.05)
            server(done, total)

        with hooks.between_steps(between):
            out = lm.forward(lm.encode("the cat sat on the mat")).logits
        order.append("slice ended")
        on_step(1, 1)
        return out

    job = jobs.submit(("one slice",), fn)
    first_block.wait(10)
    with lock:
        order.append("request")
    assert job.wait(30) and job.state == "done", job.error
    assert order.index("request") < order.index("slice ended"), order
    np.testing.assert_allclose(job.result, lm.forward(lm.encode("the cat sat on the mat")).logits, atol=1e-6)
    assert not lock.locked()


def test_a_long_unembedding_pauses_between_row_chunks_and_gives_the_same_logits():
    from attnlab.model.config import ModelConfig
    from attnlab.model.transformer import UNEMBED_ROWS, Decoder

    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=300, d_model=32, n_heads=2, n_layers=1, d_mlp=64, max_len=1024)).eval()
    h = torch.randn(1, UNEMBED_ROWS + 100, 32)
    with torch.no_grad():
        whole = model.lm_head(h)
        seen = []
        with hooks.between_steps(lambda done, total: seen.append((done, total))):
            chunked = model.unembed(h)
        assert model.unembed(h[:, :UNEMBED_ROWS]).shape == (1, UNEMBED_ROWS, 300)  # short: one product
    assert seen == [(1, 2), (2, 2)]  # two row chunks: 512 rows and the last 100
    assert chunked.shape == whole.shape
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)


def test_a_long_texts_mlp_pauses_between_row_chunks_and_a_whole_pass_matches():
    from attnlab.model.config import ModelConfig
    from attnlab.model.layers import MLP_ROWS
    from attnlab.model.transformer import UNEMBED_ROWS, Decoder

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=300, d_model=32, n_heads=2, n_layers=2, d_mlp=64, max_len=4096, mlp="swiglu")
    model = Decoder(cfg).eval()
    ids = torch.randint(0, 300, (1, MLP_ROWS + 200))
    seen = []
    with torch.no_grad():
        plain = model(ids).logits
        with hooks.between_steps(lambda done, total: seen.append((done, total))):
            paused = model(ids).logits
        x = torch.randn(1, MLP_ROWS + 200, 32)
        mlp = model.blocks[0].mlp
        with hooks.between_steps(lambda done, total: None):
            torch.testing.assert_close(mlp(x), mlp._plain(x), rtol=0, atol=1e-6)
    mlp_steps, unembed_steps = [(1, 2), (2, 2)], [(i, 3) for i in (1, 2, 3)]  # 1,224 rows: 1,024 + 200; 512 × 3
    assert UNEMBED_ROWS == 512 and seen == (mlp_steps + [(1, 2)]) + (mlp_steps + [(2, 2)]) + unembed_steps
    torch.testing.assert_close(paused, plain, rtol=0, atol=1e-5)
