"""The attnlab command as a newcomer meets it (issue 31): the words it prints and the mistakes it catches."""

from __future__ import annotations

import json

import numpy as np
import pytest
from attnlab.cli.main import main
from PIL import Image


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_capture_on_a_lecture_model_warns_of_unknown_words_and_saves_ids(tmp_path, capsys):
    from attnlab.model.registry import load

    out = tmp_path / "cap.npz"
    rc, _, err = run_cli(capsys, "capture", "--model", "lecture-decoder", "--text", "garo has a zebra .",
                         "--out", str(out))
    assert rc == 0
    z = np.load(out)
    lm = load("lecture-decoder")
    assert z["ids"].tolist() == lm.encode("garo has a zebra .").ids[0].tolist()
    unk = lm.tokenizer.unk_id
    assert unk is not None and (z["ids"] == unk).sum() == 1  # "zebra" is no lecture word
    assert "1 word(s)" in err and "'zebra' (text 4)" in err and "[UNK]" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(capsys, "capture", "--model", "lecture-decoder", "--text", "garo has a parrot .",
                         "--out", str(out))
    assert rc == 0 and err == ""


def test_capture_and_check_read_an_image_for_a_vision_model(tmp_path, capsys):
    from attnlab.model.lecture.shapes import shape_images
    from attnlab.model.registry import load

    img = shape_images(2, 3, "eval")[1].image  # uint8 [32, 32, 3]
    path = tmp_path / "shape.png"
    Image.fromarray(img).save(path)
    out = tmp_path / "vit.npz"
    rc, _, _ = run_cli(capsys, "capture", "--model", "lecture-vit", "--image", str(path), "--out", str(out))
    assert rc == 0
    lm = load("lecture-vit")
    want = lm.run(inputs=lm.encode_image(img))
    site = next(iter(want.records))
    np.testing.assert_allclose(np.load(out)[f"{site}/pattern"], want.records[site].pattern(), atol=1e-6)
    rc, out_, _ = run_cli(capsys, "check", "--model", "lecture-vit", "--image", str(path), "--json")
    assert rc == 0 and json.loads(out_)["passed"] is True
    rc, _, err = run_cli(capsys, "check", "--model", "lecture-vit", "--image", str(tmp_path / "none.png"))
    assert rc == 2 and "no such file" in err
    rc, _, err = run_cli(capsys, "check", "--model", "random-decoder", "--image", str(path))
    assert rc == 2 and "--image is for vision models" in err
    rc, _, err = run_cli(capsys, "faithfulness", "--model", "lecture-vit", "--image", str(path))
    assert rc == 2 and "attnlab capture --model lecture-vit --image FILE" in err


def test_check_prints_skip_for_a_check_that_does_not_apply(capsys):
    rc, out, _ = run_cli(capsys, "check", "--model", "random-encoder")
    assert rc == 0
    skips = [x for x in out.splitlines() if x.startswith("SKIP")]
    assert [x.split()[1] for x in skips] == ["cache_vs_no_cache_logits", "cache_vs_no_cache_pattern"]
    assert all("not applicable" in x for x in skips) and not any("PASS  cache_vs" in x for x in out.splitlines())


def test_eval_says_examples_and_answers_and_prints_its_detail(capsys):
    rc, out, _ = run_cli(capsys, "eval", "--model", "lecture-decoder", "--n", "12", "--detail")
    assert rc == 0
    rc2, js, _ = run_cli(capsys, "eval", "--model", "lecture-decoder", "--n", "12", "--detail", "--json")
    report = json.loads(js)
    lines = out.splitlines()
    for task, m in report["tasks"].items():
        line = next(x for x in lines if x.startswith(f"{task} "))
        assert f"examples={m['n']}" in line and f"answers={m['answers']}" in line and "of answers" in line
        for kind, k in m["kinds"].items():
            assert any(x.startswith(f"  {kind} ") and f"examples={k['n']}" in x for x in lines)
    assert "n=" not in out


@pytest.mark.parametrize("argv, message", [
    (["train", "--model", "lecture-decoder", "--steps", "-1"], "--steps must be at least 1, got -1"),
    (["train", "--model", "lecture-vit", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["check", "--model", "/no/such/dir"], "the folder /no/such/dir does not exist"),
    (["check", "--model", "random-decoder", "--src-text", "x"], "--src-text is the source of an encoder–decoder"),
    (["bench", "--models", "gpt3"], "use random-gpt2-small, lecture-decoder and/or smollm2"),
])
def test_mistakes_exit_2_with_one_line(capsys, argv, message):
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_src_text_alone_keeps_the_default_target(capsys, tmp_path):
    out = tmp_path / "c.npz"
    rc, _, _ = run_cli(capsys, "capture", "--model", "random-encdec", "--src-text", "abc", "--out", str(out))
    z = np.load(out)
    assert rc == 0 and z["src_tokens"].tolist()[:3] == ["a", "b", "c"] and z["tokens"].tolist() == ["[BOS]"]
    rc, js, _ = run_cli(capsys, "check", "--model", "random-encdec", "--src-text", "abc", "--json")
    assert rc == 0 and json.loads(js)["passed"] is True


def test_help_says_defaults(capsys):
    from attnlab.cli.main import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    app = {a.dest: a.help for a in sub.choices["app"]._actions}
    assert "default 127.0.0.1" in app["host"] and "default 8501" in app["port"]
    cap = {a.dest: a.help for a in sub.choices["capture"]._actions}
    assert "default" in cap["backend"] and "eager" in cap["backend"]
    bench = {a.dest: a for a in sub.choices["bench"]._actions}
    assert bench["models"].default == "random-gpt2-small,lecture-decoder"


@pytest.mark.parametrize("argv", [["app", "--device", "cpu", "--no-warm", "--port", "8597"], ["handout", "--out", "h.html"]])
def test_a_command_whose_package_is_missing_says_so_in_one_line(argv, tmp_path):
    """A partial install (pip install --no-deps, a GPU machine without the app's packages): `attnlab app` and
    `attnlab handout` without streamlit name the package in one line, exit 2 (were tracebacks; app's from the
    server process it had already replaced itself with)."""
    import subprocess
    import sys
    from pathlib import Path

    argv = [str(tmp_path / a) if a.endswith(".html") else a for a in argv]
    code = ("import sys; sys.modules['streamlit'] = None; from attnlab.cli.main import main; "  # as if not installed
            f"sys.exit(main({argv!r}))")
    root = Path(__file__).resolve().parents[2]  # this checkout's attnlab, not the one the venv installed
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == ["attnlab: error: this command needs the package streamlit, which is not "
                                             "installed (pip install streamlit)"]


@pytest.mark.parametrize("argv, path, flag", [
    (["--class", "--sessions", "3", "--seconds", "10"], "docs/benchmarks.json", "--out"),  # the default, elsewhere
    (["--browser", "--quick"], "docs/benchmarks.json", "--out"),
    (["--quick", "--out", "nowhere/b.json"], "nowhere/b.json", "--out"),
    (["--quick", "--docs", "nowhere/b.md"], "nowhere/b.md", "--docs"),
])
def test_bench_refuses_a_file_it_cannot_write_before_it_measures(argv, path, flag, monkeypatch, tmp_path, capsys):
    """Run from a folder without docs/ (an installed attnlab), `attnlab bench --class` measured its sessions, then
    failed to write docs/benchmarks.json and lost them; every file's folder is checked before measuring."""
    import attnlab.bench.report
    import attnlab.bench.wsclass

    def measured(*a, **k):
        raise AssertionError("measured before checking where the result goes")

    monkeypatch.setattr(attnlab.bench.wsclass, "class_on_server", measured)
    monkeypatch.setattr(attnlab.bench.report, "measure", measured)
    monkeypatch.setattr("attnlab.bench.browser.run_browser", measured)
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "bench", *argv)
    assert rc == 2 and err == (f"attnlab: error: cannot write {path}: there is no folder {path.split('/')[0]} here; "
                               f"pass {flag} FILE in an existing folder\n")
