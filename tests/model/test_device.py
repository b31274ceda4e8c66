"""attnlab.model.device and a 16-bit run on the CPU: choices resolve in one place, cuda without a GPU is one clear
InputError, a bfloat16 model keeps a float32 reference, and its records are float32 numpy."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from attnlab.model.device import NO_CUDA, dtype_name, is_half, resolve, resolve_device, resolve_dtype
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@no_cuda
def test_auto_is_cpu_float32_without_cuda():
    assert resolve_device("auto") == resolve_device(None) == "cpu"
    assert resolve("auto", "auto") == ("cpu", torch.float32)


@no_cuda
def test_cuda_without_a_gpu_is_one_line():
    with pytest.raises(InputError) as e:
        resolve_device("cuda")
    assert str(e.value) == NO_CUDA and "\n" not in NO_CUDA
    assert "torch.cuda.is_available() is False" in NO_CUDA


@no_cuda
def test_the_python_api_refuses_cuda_without_a_gpu_before_loading():
    """al.load(..., device=...) and lm.to(device) check the device first (were 'AssertionError: Torch not compiled
    with CUDA enabled' after reading every weight, and torch's RuntimeError for a name it does not know)."""
    for device in ("cuda", "cuda:1", "CUDA"):
        with pytest.raises(InputError, match="^" + re.escape(NO_CUDA) + "$"):
            load("lecture-decoder", device=device)
    with pytest.raises(InputError, match="^unknown device 'gpu'; choose one of auto, cpu, cuda \\(or cuda:N\\)$"):
        load("lecture-decoder", device="gpu")
    lm = load("lecture-decoder", device="auto")
    assert lm.device == "cpu"
    with pytest.raises(InputError, match="^cuda was asked for"):
        lm.to("cuda")
    assert lm.device == "cpu" and lm.run_with_hooks("garo is seven .").shape == (1, 5, lm.cfg.vocab_size)


def test_the_python_api_takes_dtype_names_and_refuses_other_dtypes_in_one_line():
    """al.load(..., dtype=) and lm.to(dtype=) take 'bfloat16' as transformers and TransformerLens do (was
    "RuntimeError: Invalid device string: 'bfloat16'"); a dtype that is no float is one line (torch.int8 was a
    state-dict copy error)."""
    lm = load("lecture-decoder", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and lm.run_with_hooks("garo is seven .").dtype == torch.bfloat16
    assert load("lecture-decoder", dtype="torch.float16").dtype == torch.float16
    assert load("lecture-decoder", dtype="auto").dtype == torch.float32  # the CPU's
    assert lm.to(dtype="float32").dtype == torch.float32
    for bad in (torch.int8, "fp8", "int4"):
        with pytest.raises(InputError, match=f"^dtype {re.escape(repr(bad))} is not a floating-point dtype; choose "
                                             "one of float32, bfloat16, float16 \\(a name or a torch dtype\\), or auto$"):
            load("lecture-decoder", dtype=bad)
    with pytest.raises(InputError, match="is not a floating-point dtype"):
        lm.to(dtype=torch.int64)
    assert lm.dtype == torch.float32


@pytest.mark.parametrize("choice, device, dtype", [
    ("auto", "cpu", torch.float32), ("auto", "cuda", torch.bfloat16), ("float32", "cuda", torch.float32),
    ("bfloat16", "cpu", torch.bfloat16), ("float16", "cuda", torch.float16), ("FLOAT16", "cpu", torch.float16),
])
def test_dtype_resolution(choice, device, dtype):
    assert resolve_dtype(choice, device) is dtype


def test_unknown_choices_are_input_errors():
    with pytest.raises(InputError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(InputError, match="unknown dtype 'float8'"):
        resolve_dtype("float8", "cpu")


def test_dtype_names():
    assert [dtype_name(d) for d in (torch.float32, torch.bfloat16, torch.float16)] == ["float32", "bfloat16", "float16"]
    assert is_half(torch.bfloat16) and is_half(torch.float16) and not is_half(torch.float32)


def test_bfloat16_model_builds_its_float32_reference_only_when_asked():
    lm = load("random-decoder", dtype=torch.bfloat16, device="cpu")
    assert lm.run_info() == {"device": "cpu", "dtype": "bfloat16"}
    assert not hasattr(lm, "reference")  # no float32 twin held beside the model
    ref = lm.reference_model()
    assert ref.dtype == torch.float32 and ref.model is not lm.model and ref.tokenizer is lm.tokenizer
    assert lm.reference_model().model is not ref.model  # built anew each time, freed with the check
    fp32 = load("random-decoder")
    assert fp32.reference_model() is fp32
    for a, b in zip(ref.model.parameters(), fp32.model.parameters()):  # the weights as loaded, not upcast
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_records_of_a_bfloat16_run_are_float32_numpy(backend):
    lm = load("random-decoder", dtype=torch.bfloat16)
    run = lm.run("the cat sat", backend=backend)
    assert run.top_probs.dtype == np.float32 and run.top_ids.dtype == np.int64
    for rec in run.records.values():
        assert isinstance(rec.q, np.ndarray) and rec.q.dtype == np.float32 and rec.k.dtype == np.float32
        p = rec.pattern()  # recomputed in float32 from the bf16 q and k: rows sum to 1 within float32
        assert rec.lazy and p.dtype == np.float32 and np.abs(p.sum(-1) - 1).max() < 1e-5


def test_as_computed_keeps_the_16_bit_softmax():
    lm = load("random-decoder", dtype=torch.bfloat16)
    inp = lm.encode("the cat sat on the mat")
    rec = lm.forward(inp, backend="eager", as_computed=True).capture["blocks.0.attn"]
    err = np.abs(rec.pattern().sum(-1) - 1).max()
    assert not rec.lazy and rec.pattern_full.dtype == np.float32 and 1e-4 < err <= 2 ** -7  # bf16 rounding


def test_the_model_layer_on_this_path_imports_no_streamlit_or_plotly():
    code = ("import sys, torch\nfrom model.device import resolve\nfrom model.registry import load\n"
            "d, t = resolve('cpu', 'bfloat16')\nload('random-decoder', dtype=t, device=d).run('hi', backend='sdpa')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_casting_back_to_float32_takes_the_weights_as_loaded():
    lm = load("random-decoder", dtype=torch.bfloat16)
    lm.to(dtype=torch.float32)
    assert lm.dtype == torch.float32
    for a, b in zip(lm.model.parameters(), load("random-decoder").model.parameters()):
        assert torch.equal(a, b)
