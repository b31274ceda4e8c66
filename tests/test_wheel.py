"""The wheel works outside the checkout (issue 39): built with pip's standard front end, installed into a fresh venv,
run from an empty folder that holds its own model.py and app.py.

The venv gets attnlab alone (`--no-deps`); its dependencies come from a .pth file naming this interpreter's
site-packages, so nothing is downloaded (torch alone is gigabytes). Python adds the lines of a .pth file to sys.path
after the venv's own site-packages and does not run the .pth files of the folders it names, so the editable
install of this checkout stays invisible there: every `attnlab` the venv imports is the wheel's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("model", "analysis", "app", "pages", "cli", "bench", "lecture", "sample_texts", "docs", "attnlab", "setup.py",
           "pyproject.toml", "README.md")


def _env() -> dict[str, str]:
    """This environment without what would point Python at the checkout or at this venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"OMP_NUM_THREADS": "1"}


def _run(cmd, cwd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(the venv's bin folder, the wheel, an empty folder with the user's own model.py and app.py)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: the build's build/ and *.egg-info stay out of the checkout, no stale build/lib
    src.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=junk)
        else:
            shutil.copy2(ROOT / name, src / name)
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", ".", "-w", str(tmp)], src)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp.glob("attnlab-*.whl")
    env = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(env)], tmp).returncode == 0
    python = env / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip()
    Path(site, "attnlab_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)], tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    user = tmp / "notebooks"
    user.mkdir()
    (user / "model.py").write_text('WHO = "the user\'s model.py"\n')
    (user / "app.py").write_text('WHO = "the user\'s app.py"\n')
    return env / "bin", wheel, user


def test_the_wheel_holds_attnlab_alone_with_its_data(venv):
    _, wheel, _ = venv
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"attnlab", wheel.name.split("-py3")[0] + ".dist-info"}
    for folder in ("attnlab/pages/", "attnlab/sample_texts/", "attnlab/app/link_frontend/", "attnlab/app/tour/"):
        assert any(n.startswith(folder) for n in names), folder
    assert "attnlab/lecture/train.py" in names and "attnlab/lecture/cards/lecture.py" in names  # the tooling room
    assert "attnlab/sample_texts/lecture.json" in names and "attnlab/app/streamlit_config.toml" in names
    assert any(n.startswith("attnlab/docs/") and n.endswith(".json") for n in names)
    for m in ("lecture-decoder", "lecture-encoder", "lecture-encdec", "lecture-moe", "lecture-vit"):
        assert f"attnlab/model/lecture/checkpoints/{m}/model.safetensors" in names, m


def test_import_run_and_check_from_a_folder_with_its_own_model_py(venv):
    bin_, _, user = venv
    code = ("import model, app, attnlab as al; "
            "assert model.WHO == \"the user's model.py\" and not hasattr(model, 'load'), model.__file__; "
            "assert app.WHO == \"the user's app.py\", app.__file__; "
            "import attnlab.model, attnlab.data; print(attnlab.__file__); "
            "print(al.load('lecture-decoder').run('garo is seven .').tokens); "
            "print(attnlab.data.data_folder('sample_texts'))")
    r = _run([str(bin_ / "python"), "-c", code], user)
    assert r.returncode == 0, r.stderr[-2000:]
    home, tokens, samples = r.stdout.strip().splitlines()
    installed = str(bin_.parent)
    assert home.startswith(installed) and samples.startswith(installed) and str(ROOT) not in r.stdout
    assert tokens == "['[BOS]', 'garo', 'is', 'seven', '.']"
    r = _run([str(bin_ / "attnlab"), "check", "--model", "lecture-decoder"], user)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") >= 8


def test_attnlab_app_serves_every_page(venv):
    """`attnlab app` from the user's folder: the health endpoint answers, and every page of the navigation runs to
    its end over Streamlit's websocket with its own title and no exception or error box."""
    from attnlab.app.navigation import PAGES
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect

    bin_, _, user = venv
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = user.parent / "app.log"  # a file, not a pipe: a full pipe would stall the server
    with open(log, "w") as out:
        server = subprocess.Popen([str(bin_ / "attnlab"), "app", "--port", str(port), "--device", "cpu"], cwd=user,
                                  env=_env(), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        for _ in range(120):
            try:
                with opener.open(f"{base}/_stcore/health", timeout=2) as r:
                    assert r.read() == b"ok"
                    break
            except OSError:
                assert server.poll() is None, log.read_text()[-2000:]
                time.sleep(0.5)
        else:
            pytest.fail("attnlab app did not answer /_stcore/health in 60 s")
        with connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=2**27,
                     open_timeout=30) as ws:
            for _, title, path, _ in PAGES:
                headings, problems = _open_page(ws, path, BackMsg, ForwardMsg)
                assert not problems, (path, problems)
                assert any(title in h for h in headings), (path, headings[:3])
    finally:
        server.terminate()
        server.wait(timeout=30)


def _open_page(ws, path: str, BackMsg, ForwardMsg) -> tuple[list[str], list[str]]:
    """Run page `path` once: (its headings, what went wrong: an exception, an error box, page not found, an
    unfinished run)."""
    msg = BackMsg()
    msg.rerun_script.page_name = path
    ws.send(msg.SerializeToString())
    headings, problems = [], []
    while True:
        f = ForwardMsg()
        f.ParseFromString(ws.recv(timeout=180))
        kind = f.WhichOneof("type")
        if kind == "page_not_found":
            problems.append("page not found")
        elif kind == "delta" and f.delta.WhichOneof("type") == "new_element":
            el = f.delta.new_element
            what = el.WhichOneof("type")
            if what == "heading":
                headings.append(el.heading.body)
            elif what == "exception":
                problems.append(f"exception: {el.exception.type}: {el.exception.message[:300]}")
            elif what == "alert" and el.alert.format == 1:  # Alert.ERROR
                problems.append(f"error box: {el.alert.body[:300]}")
        elif kind == "script_finished":
            if f.script_finished != 0:  # FINISHED_SUCCESSFULLY
                problems.append(f"script_finished {f.script_finished}")
            return headings, problems
