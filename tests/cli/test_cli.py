"""The attnlab command's contract: capture, check, models, and clear errors (exit 2, one line)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from attnlab.cli.main import main


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("model", ["random-decoder", "random-encoder", "random-encdec"])
def test_check_passes_on_random_models(capsys, model):
    rc, out, err = run_cli(capsys, "check", "--model", model, "--json")
    report = json.loads(out)
    assert rc == 0 and report["passed"] is True
    names = [c["name"] for c in report["checks"]]
    for required in ["rows_sum_to_one", "no_mass_outside_mask", "finite", "eager_vs_sdpa", "eager_vs_flash",
                     "cache_vs_no_cache_logits", "cache_vs_no_cache_pattern"]:
        assert required in names
    assert ("greedy_cache_tokens_equal" in names) == (model != "random-encoder")
    for c in report["checks"]:
        assert set(c) >= {"name", "value", "tolerance", "passed"}
        if c["value"] is not None:
            assert c["value"] <= c["tolerance"]


def test_capture_writes_the_npz_contract(tmp_path, capsys):
    out = tmp_path / "cap.npz"
    rc, _, _ = run_cli(capsys, "capture", "--model", "random-encdec", "--text", "ab", "--src-text", "<b>x</b>",
                       "--backend", "flash", "--out", str(out))
    assert rc == 0
    z = np.load(out)
    assert z["tokens"].tolist() == ["[BOS]", "a", "b"]
    assert z["src_tokens"].tolist() == ["<", "b", ">", "x", "<", "/", "b", ">", "[EOS]"]
    sites = sorted({k.split("/")[0] for k in z.files if "/" in k})
    assert sites == ["decoder.blocks.0.attn", "decoder.blocks.0.cross_attn", "decoder.blocks.1.attn",
                     "decoder.blocks.1.cross_attn", "encoder.blocks.0.attn", "encoder.blocks.1.attn"]
    p, s, m = z["decoder.blocks.1.cross_attn/pattern"], z["decoder.blocks.1.cross_attn/scores"], z["decoder.blocks.1.cross_attn/mask"]
    assert p.dtype == np.float32 and p.shape == (4, 3, 9) and s.shape == (4, 3, 9) and m.shape == (3, 9)
    assert m.dtype == bool and m.all()
    dm = z["decoder.blocks.0.attn/mask"]
    assert dm.tolist() == np.tril(np.ones((3, 3), bool)).tolist()
    np.testing.assert_allclose(z["decoder.blocks.0.attn/pattern"].sum(-1), 1, atol=1e-5)
    assert np.isfinite(z["decoder.blocks.0.attn/scores"]).all()
    assert (z["decoder.blocks.0.attn/pattern"][:, ~dm] == 0).all()


def test_capture_backends_agree(tmp_path, capsys):
    files = {}
    for b in ("eager", "sdpa", "flash"):
        files[b] = tmp_path / f"{b}.npz"
        assert run_cli(capsys, "capture", "--model", "random-decoder", "--text", "héllo", "--backend", b,
                       "--out", str(files[b]))[0] == 0
    e = np.load(files["eager"])
    for b in ("sdpa", "flash"):
        z = np.load(files[b])
        for k in e.files:
            if k.endswith(("/pattern", "/scores")):
                assert np.abs(z[k] - e[k]).max() <= 1e-5, k


@pytest.mark.parametrize(
    "argv, message",
    [
        (["capture", "--model", "random-decoder", "--text", "", "--out", "x.npz"], "is empty"),
        (["capture", "--model", "random-decoder", "--text", "  \n\t ", "--out", "x.npz"], "is empty"),
        (["capture", "--model", "random-decoder", "--text", "x" * 300, "--out", "x.npz"], "context is 256 tokens"),
        (["capture", "--model", "random-decoder", "--text", "a\x00b", "--out", "x.npz"], "control character U+0000"),
        (["capture", "--model", "random-decoder", "--text", "a\x1bb", "--out", "x.npz"], "control character U+001B"),
        (["capture", "--model", "random-decoder", "--text", "y" * 100_000, "--out", "x.npz"], "limit is 20,000"),
        (["capture", "--model", "no-such-model", "--text", "hi", "--out", "x.npz"], "unknown model 'no-such-model'"),
        (["check", "--model", "no-such-model", "--json"], "unknown model"),
        (["check", "--model", "random-encdec", "--text", "hi", "--json"], "needs a source text"),
        (["capture", "--model", "random-decoder", "--text", "hi", "--backend", "cuda", "--out", "x.npz"], "invalid choice"),
        (["capture", "--model", "random-decoder", "--text", "hi", "--out", "x.txt"], "must end in .npz"),
        (["app", "--port", "70000"], "--port must be"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("attnlab: error: ") and message in err
    assert "Traceback" not in err


def test_console_script_runs_as_a_process(tmp_path):
    res = subprocess.run([sys.executable, "-m", "cli", "capture", "--model", "random-decoder", "--text", "",
                          "--out", str(tmp_path / "x.npz")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "empty" in res.stderr
    res = subprocess.run([sys.executable, "-m", "cli", "models", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0
    names = {m["name"]: m for m in json.loads(res.stdout)["models"]}
    assert names["random-encdec"]["kind"] == "encoder–decoder" and names["random-decoder"]["context"] == 256


def test_version_three_ways(capsys):
    """`attnlab --version`, `python -m attnlab --version` and `attnlab.__version__` say pyproject.toml's version."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    from attnlab.cli.main import main as cli_main

    import attnlab

    want = tomllib.loads((Path(attnlab.__file__).parent.parent / "pyproject.toml").read_text())["project"]["version"]
    assert attnlab.__version__ == want
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"attnlab {want}\n"
    done = subprocess.run([sys.executable, "-m", "attnlab", "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"attnlab {want}\n")


def test_models_table_lines_up(capsys):
    from attnlab.cli.main import main as cli_main

    assert cli_main(["models"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "context=" in x]
    assert len(lines) >= 5
    for field in ("converted", "layers=", "heads=", "context="):
        assert len({x.index(field) for x in lines}) == 1, field  # every row's column starts at one place
