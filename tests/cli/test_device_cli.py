"""--device/--dtype on app, check, capture and bench: parsed in one place, cuda without a GPU exits 2 with one
line, bfloat16 runs on the CPU with its own check rules, and the app gets the choice through its environment."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from attnlab.cli.main import main

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@no_cuda
@pytest.mark.parametrize("argv", [
    ["check", "--model", "random-decoder", "--device", "cuda"],
    ["capture", "--model", "random-decoder", "--text", "hi", "--device", "cuda", "--out", "x.npz"],
    ["bench", "--device", "cuda"],
    ["app", "--device", "cuda"],
])
def test_cuda_without_a_gpu_exits_2_with_one_line(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("os.execve", lambda *a: pytest.fail("the app must not start"))
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err == ("attnlab: error: cuda was asked for but this machine has no CUDA GPU "
                   "(torch.cuda.is_available() is False)\n")


@pytest.mark.parametrize("argv, message", [
    (["check", "--model", "random-decoder", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["check", "--model", "random-decoder", "--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),
    (["app", "--dtype", "int8"], "argument --dtype: invalid choice"),
    (["bench", "--device", "gpu"], "argument --device: invalid choice"),
    (["bench", "--device", "cpu", "--dtype", "bfloat16"], "the CPU benchmark runs float32"),
    (["bench", "--replicas", "3"], "--replicas K (1..8) goes with --class --clients ws"),  # not the CPU benchmark
    (["bench", "--class", "--clients", "browser", "--replicas", "2"], "goes with --class --clients ws"),
    (["bench", "--class", "--replicas", "9"], "--replicas K (1..8)"),
    (["bench", "--class", "--sessions", "0"], "--sessions must be 1..100"),
    (["bench", "--clients", "browser"], "--clients goes with --class"),
    (["bench", "--navigation"], "--smollm2 and --navigation go with --browser"),  # not the CPU benchmark
    (["bench", "--smollm2", "--quick"], "--smollm2 and --navigation go with --browser"),
])
def test_bad_choices_exit_2(capsys, argv, message):
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2 and err.count("\n") == 1 and message in err


def test_check_in_bfloat16_on_the_cpu(capsys):
    rc, out, _ = run_cli(capsys, "check", "--model", "random-decoder", "--dtype", "bfloat16", "--json")
    report = json.loads(out)
    assert rc == 0 and report["passed"] and (report["device"], report["dtype"]) == ("cpu", "bfloat16")
    assert report["rules"]["backend"] == 4e-2 and report["rules"]["backend_vs_eager_factor"] == 2.0
    rows = {c["name"]: c for c in report["checks"]}
    assert rows["eager_vs_flash"]["tolerance"] == 4e-2 and 3e-3 < rows["eager_vs_flash"]["value"] <= 4e-2
    assert "float32 eager reference" in rows["eager_vs_sdpa"]["note"]


def test_check_text_says_the_rules(capsys):
    rc, out, _ = run_cli(capsys, "check", "--model", "random-encoder", "--device", "cpu", "--dtype", "bfloat16")
    assert rc == 0 and out.splitlines()[0].startswith("bfloat16 on cpu: fused backends vs float32 eager within 0.04")


def test_explicit_cpu_float32_is_the_default_report(capsys):
    _, default, _ = run_cli(capsys, "check", "--model", "random-encdec", "--json")
    _, explicit, _ = run_cli(capsys, "check", "--model", "random-encdec", "--json", "--device", "cpu",
                             "--dtype", "float32")
    assert default == explicit and set(json.loads(default)) == {"passed", "checks"}


def test_capture_in_bfloat16_writes_float32(tmp_path, capsys):
    out = tmp_path / "cap.npz"
    rc, _, _ = run_cli(capsys, "capture", "--model", "random-decoder", "--text", "abc", "--backend", "sdpa",
                       "--dtype", "bfloat16", "--out", str(out))
    z = np.load(out)
    assert rc == 0 and z["blocks.0.attn/pattern"].dtype == np.float32
    np.testing.assert_allclose(z["blocks.0.attn/pattern"].sum(-1), 1, atol=1e-2)


def test_app_passes_the_choice_through_its_environment(capsys, monkeypatch):
    import os

    seen = {}
    monkeypatch.setattr("os.execve", lambda exe, cmd, env: seen.update(cmd=cmd, env=env))
    monkeypatch.setattr("os.chdir", lambda p: None)
    rc, _, _ = run_cli(capsys, "app", "--device", "cpu", "--dtype", "bfloat16", "--port", "8600")
    assert rc == 0 and "8600" in seen["cmd"]
    assert (seen["env"]["ATTNLAB_DEVICE"], seen["env"]["ATTNLAB_DTYPE"]) == ("cpu", "bfloat16")
    assert os.environ.get("ATTNLAB_DTYPE") != "bfloat16"  # this process's environment is left alone
