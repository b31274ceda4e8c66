"""app/state.py outside a server: captures are numpy and picklable; the inference lock fails fast."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from attnlab.app import downloads, frame, state
from attnlab.app.run_settings import can_switch_device
from attnlab.model.loaded import TOP_K


def test_capture_is_picklable_numpy():
    cap = state.capture("random-decoder", "abc", None, "sdpa")
    assert cap.tokens == ["[BOS]", "a", "b", "c"]
    back = pickle.loads(pickle.dumps(cap))
    stack = back.matrices("self")
    assert isinstance(stack, np.ndarray) and stack.shape == (2, 4, 4, 4)
    np.testing.assert_allclose(stack.sum(-1), 1, atol=1e-5)
    assert back.mask_of("self").dtype == bool and back.top_probs.shape == (4, TOP_K)


def test_capture_with_a_mask_option():
    cap = state.capture("random-decoder", "abcd", None, "eager", ("sliding_window", 2))
    m = cap.mask_of("self")
    assert m[4].tolist() == [False, False, False, True, True]


def test_busy_lock_gives_a_clear_error(monkeypatch):
    monkeypatch.setattr(state, "BUSY_WAIT_S", 0.05)
    lock = state._inference_lock()
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        with pytest.raises(state.BusyError, match="busy"):
            with state.inference():
                pass
    finally:
        release.set()
        t.join()
    with state.inference():  # free again
        pass


def test_error_messages_say_what_to_do():
    from attnlab.model.checkpoint import CheckpointError
    from attnlab.model.inputs import InputError

    assert frame.error_message(InputError("the text is empty"))[1].startswith("The text is empty.")
    assert "Pick another model" in frame.error_message(CheckpointError("bad shapes"))[1]
    level, msg = frame.error_message(state.BusyError("The server is busy"))
    assert level == "warning" and "busy" in msg
    assert "Traceback" not in frame.error_message(RuntimeError("boom"))[1]


def test_ablation_changes_the_prediction_of_a_random_model():
    before, after = state.ablate("random-decoder", "hello", None, "blocks.1.attn", 0, 5, None, "eager")
    assert before.target_id == after.target_id and before.position == 5
    assert not np.allclose(before.probs, after.probs)


def test_download_payloads_are_valid_files():
    import io
    import json

    import pandas as pd

    arrays = {"m": np.eye(2, dtype=np.float32), "tokens": ["a", "<b>"]}
    back = np.load(io.BytesIO(downloads._npz_bytes(arrays)))
    assert back["m"].shape == (2, 2) and list(back["tokens"]) == ["a", "<b>"]
    doc = json.loads(json.dumps(downloads._jsonable({"x": np.array([1.0, np.nan]), "n": np.int64(3)}), allow_nan=False))
    assert doc == {"x": [1.0, None], "n": 3}
    csv = downloads.matrix_csv(np.eye(2), ["a", "b"], ["a", "b"])
    assert pd.read_csv(io.StringIO(csv), index_col=0).shape == (2, 2)


# -- device and dtype --------------------------------------------------------------------------------------
def test_run_settings_follow_the_app_command(monkeypatch):
    import torch

    monkeypatch.delenv("ATTNLAB_DEVICE", raising=False)
    monkeypatch.delenv("ATTNLAB_DTYPE", raising=False)
    if not torch.cuda.is_available():
        assert state.run_settings() == ("cpu", "float32") and not can_switch_device()
    monkeypatch.setenv("ATTNLAB_DEVICE", "cpu")
    monkeypatch.setenv("ATTNLAB_DTYPE", "bfloat16")
    assert state.run_settings() == ("cpu", "bfloat16")


def test_models_and_results_are_kept_per_device_and_dtype(monkeypatch):
    import torch

    monkeypatch.setenv("ATTNLAB_DEVICE", "cpu")
    monkeypatch.setenv("ATTNLAB_DTYPE", "float32")
    fp32, cap32 = state.model("random-decoder"), state.capture("random-decoder", "abc", None, "sdpa")
    monkeypatch.setenv("ATTNLAB_DTYPE", "bfloat16")
    bf16, cap16 = state.model("random-decoder"), state.capture("random-decoder", "abc", None, "sdpa")
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16 and fp32 is not bf16
    assert cap16 is not cap32 and cap16.records["blocks.0.attn"].q.dtype == np.float32
    diff = np.abs(cap16.matrices("self") - cap32.matrices("self")).max()
    assert 0 < diff < 4e-2  # the bf16 run is its own result, close to the float32 one
    monkeypatch.setenv("ATTNLAB_DTYPE", "float32")
    assert state.model("random-decoder") is fp32


def _threads_inside(lm):
    """How many torch threads a cached entry point's function sees."""
    import torch

    return torch.get_num_threads()


def test_small_models_run_on_one_cpu_thread_and_the_count_comes_back(monkeypatch):
    import torch

    threads_inside = state.on_model(_threads_inside)
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads_inside.clear()
        assert threads_inside("random-decoder") == 1  # 133,120 parameters, under SMALL_MODEL
        assert torch.get_num_threads() == 2  # restored after the call
        monkeypatch.setattr(state, "SMALL_MODEL", 1_000)  # the same model counted as large: left as set
        threads_inside.clear()
        assert threads_inside("random-decoder") == 2
    finally:
        threads_inside.clear()
        torch.set_num_threads(old)
