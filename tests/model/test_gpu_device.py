"""The device path on a CUDA GPU: a bfloat16 model with its float32 reference passes `attnlab check`'s
16-bit rules, records come back float32 numpy, random-long-decoder reads past the CPU limit, and the CUDA
benchmark section runs. Skipped without a CUDA GPU."""

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.checks import run_checks
from attnlab.model import hooks
from attnlab.model.registry import load

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("name", ["random-decoder", "random-encoder", "random-encdec"])
def test_bfloat16_checks_on_cuda(name):
    lm = load(name, dtype=torch.bfloat16, device="cuda")
    assert lm.run_info() == {"device": "cuda", "dtype": "bfloat16"} and lm.reference_model().device == "cuda"
    inp = lm.encode("", "the cat sat on the mat") if lm.arch == "encdec" else lm.encode("the cat sat on the mat")
    report = run_checks(lm, inp)
    assert report["passed"], report
    assert (report["device"], report["dtype"]) == ("cuda", "bfloat16")
    flash = next(c for c in report["checks"] if c["name"] == "eager_vs_flash")
    assert "[cuda]" in flash["note"]


def test_records_of_a_cuda_run_are_float32_numpy():
    lm = load("random-decoder", dtype=torch.bfloat16, device="cuda")
    run = lm.run("the cat sat", backend="flash")
    for rec in run.records.values():
        assert isinstance(rec.q, np.ndarray) and rec.q.dtype == np.float32 and rec.kernel.endswith("[cuda]")
        np.testing.assert_allclose(rec.pattern().sum(-1), 1, atol=1e-5)
    assert run.top_probs.dtype == np.float32


def test_long_decoder_reads_past_the_cpu_limit_on_cuda():
    lm = load("random-long-decoder", dtype=torch.bfloat16, device="cuda")
    assert lm.context == 32768
    run = lm.run(inputs=lm.encode("ab " * 3000), backend="sdpa", top_k=0)  # 9,001 tokens
    assert len(run.tokens) == 9001 and run.context == 32768


@pytest.mark.slow
def test_cuda_bench_section_runs():
    from attnlab.bench.cuda import CUDA_MODES, markdown, measure_cuda

    out = measure_cuda(lengths=(1024,), repeats=2, warmup=1)
    assert [r["mode"] for r in out["rows"]] == list(CUDA_MODES)
    assert all("median_ms" in r and r["peak_bytes"] > 0 for r in out["rows"])
    assert "| 1,024 |" in markdown(out)


def test_live_attention_timings_on_the_gpu():
    """The Backends page's live timings on CUDA: CUDA events, bfloat16, the allocator's peak."""
    from attnlab.analysis.machinery.backends import time_attention

    rows = time_attention((256, 2048), device="cuda", dtype=torch.bfloat16, repeats=2, budget_s=0.0)
    assert {r["backend"] for r in rows} == {"eager", "sdpa", "flash"}
    assert all(r["device"] == "cuda" and r["ms"] > 0 for r in rows)
    peak = {r["backend"]: r["peak_bytes"] for r in rows if r["T"] == 2048}
    assert peak["eager"] > 2 * peak["flash"]  # eager holds H×T×T scores and weights; flash does not


def test_lazy_rows_recomputed_on_the_gpu_equal_the_cpu():
    """Long inputs on a GPU: a fused capture's rows are recomputed there from q and k, equal to the CPU's."""
    from attnlab.model.longinput import compute_device, pattern_rows

    lm = load("random-long-decoder")
    rec = lm.run("abc " * 500, backend="sdpa")["blocks.1.attn"]
    assert compute_device() == "cuda"
    gpu, cpu = pattern_rows(rec, [0, 3], 100, 164, device="cuda"), pattern_rows(rec, [0, 3], 100, 164, device="cpu")
    assert gpu.device.type == "cpu" and float((gpu - cpu).abs().max()) <= 1e-6


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
@pytest.mark.parametrize("name", ["random-decoder", "random-encoder", "random-encdec"])
def test_a_captured_forward_never_waits_on_cuda(name, backend):
    """CUDA's own sync detector ("error": any synchronising call raises) around a capture and a padded batch."""
    lm = load(name, dtype=torch.bfloat16, device="cuda")
    inp = (lm.encode("", "the cat sat on the mat") if lm.arch == "encdec" else lm.encode("the cat sat on the mat"))
    inp = inp.to("cuda")
    ids = inp.ids.expand(2, -1)  # [2, T]
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, -2:] = False  # the second row's last two tokens are padding
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad(), hooks.capture() as cap:
            lm.model.forward_inputs(inp, backend=backend)
            if lm.arch != "encdec":
                lm.model(ids, attention_mask=real, backend=backend)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(cap.records[cap.sites[0]]) == (1 if lm.arch == "encdec" else 2)
