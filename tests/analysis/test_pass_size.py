"""Gradient attributions in bounded passes (analysis/probes/pass_size.py): the same numbers as one batch, a measured peak
within the bound where one batch would need gigabytes, and the longest input integrated gradients takes per model."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from attnlab.analysis.probes import pass_size
from attnlab.analysis.probes.attributions import ig_passes, ig_refusal, input_x_gradient, integrated_gradients
from attnlab.model.registry import load

from tests.analysis.test_relevance import encode, tiny


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_integrated_gradients_in_one_row_passes_equals_one_batch(arch, monkeypatch):
    lm = tiny(arch, 2)
    inp = encode(lm)
    whole = integrated_gradients(lm, inp, 3, steps=32)
    ixg = input_x_gradient(lm, inp, 3)
    batches = []
    forward = lm.forward
    monkeypatch.setattr(lm, "forward", lambda i, **kw: batches.append(i.ids.shape[0]) or forward(i, **kw))
    monkeypatch.setattr(pass_size, "PASS_BYTES", 1)  # one row per pass
    assert pass_size.rows_per_pass(lm, inp.ids.shape[1], True) == 1
    split = integrated_gradients(lm, inp, 3, steps=32)
    assert set(batches) == {1} and len(batches) == 1 + 33  # the target's forward, then 16 panels' 33 nodes
    np.testing.assert_allclose(split.row, whole.row, rtol=1e-10, atol=1e-12)
    if arch == "encdec":
        np.testing.assert_allclose(split.source_row, whole.source_row, rtol=1e-10, atol=1e-12)
    assert (split.steps, split.target_id) == (whole.steps, whole.target_id) == (32, whole.target_id)
    assert split.logit == pytest.approx(whole.logit, abs=1e-12)
    assert split.baseline_logit == pytest.approx(whole.baseline_logit, abs=1e-12)
    np.testing.assert_allclose(input_x_gradient(lm, inp, 3).row, ixg.row, rtol=1e-12, atol=1e-14)


MEASURE = textwrap.dedent("""
    import json, resource, sys
    import torch
    from attnlab.analysis.probes import attributions
    from attnlab.analysis.probes import pass_size
    from attnlab.model.config import ModelConfig
    from attnlab.model.registry import LoadedModel
    from attnlab.model.tokenizer import ByteTokenizer
    from attnlab.model.transformer import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=32768, d_model=64, n_heads=4, n_layers=2, max_len=128)
    lm = LoadedModel("wide-vocab", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    inp = lm.encode("attention " * 12 + "is look")  # [1, 128]
    pass_size.PASS_BYTES = 64 << 20
    attributions.input_x_gradient(lm, inp, -1)  # warm: one row with a backward
    rss = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
    ig = attributions.integrated_gradients(lm, inp, -1, steps=128)
    # VmHWM: this process's own peak (ru_maxrss would carry the forking pytest's across exec)
    peak = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")) * 1024  # kB
    json.dump({"t": inp.ids.shape[1], "growth": peak - rss, "row": pass_size.row_bytes(lm, inp.ids.shape[1], True),
               "rows": pass_size.rows_per_pass(lm, inp.ids.shape[1], True), "err": ig.completeness_error}, sys.stdout)
""")


def test_integrated_gradients_peak_stays_within_the_pass_bound():
    """A 32k vocabulary at T = 128: 130 rows in one batch would hold 130 · 2 · 128 · 32768 float32 logits and
    gradients (≈ 4.4 GB); in passes of 64 MiB the process grows by at most 4 · 64 MiB (allocator slack included)."""
    run = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["t"] == 128 and got["rows"] == 1  # one row's estimate (≈ 34 MB of logits alone) … per 64 MiB pass
    assert 2 * 128 * 32768 * 4 < got["row"] < 64 << 20
    assert 130 * got["row"] > 4e9  # what one batch would have held
    assert got["growth"] < 4 * (64 << 20), got
    assert got["err"] < 0.05


def test_integrated_gradients_limit_per_model():
    assert ig_passes() == 1 + 3 * 513  # the target, then at most 513 nodes with a backward
    lecture = load("lecture-decoder")
    assert pass_size.max_tokens(lecture, ig_passes()) == lecture.context  # the lecture models: never refused
    assert ig_refusal(lecture, lecture.context) is None
    smol = load("smollm2")
    n = pass_size.max_tokens(smol, ig_passes())
    assert ig_passes() * pass_size.row_flops(smol, n) <= pass_size.IG_MAX_FLOPS
    assert ig_passes() * pass_size.row_flops(smol, n + 1) > pass_size.IG_MAX_FLOPS
    line = ig_refusal(smol, 64)
    assert line.startswith("not run on this text: up to 1,540 forward passes over smollm2") and "\n" not in line
    assert f"beyond T = {n} tokens" in line and line.endswith("this text has 64.")
    assert pass_size.rows_per_pass(smol, 512, True) == 1 and 1.5e9 < pass_size.row_bytes(smol, 512, True) < 2.5e9
