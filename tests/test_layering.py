"""Dependencies point one way: pages → app → analysis → model, with the tooling (cli, bench, lecture) on top of them
all."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLING = {"cli", "bench", "lecture"}  # the `attnlab` command, the benchmark, the lecture models' training and cards:
# they may import every layer; no layer imports them
ROOMS = {"model", "analysis", "app", "pages", "cli", "bench", "lecture"}
ANALYSIS_JOBS = ("attention", "probes", "machinery", "faithfulness", "circuit")  # analysis/'s rooms, by job
# the one import of the project's own code inside a function in the layers: the GGUF readers need the `gguf`
# package, which a machine may lack (the GPU machine has none); a module importing them lazily says why
OPTIONAL = {"model/registry.py attnlab.model.gguf.cache"}


def room(module: str) -> str:
    """The room an import names: "attnlab.model.hooks" → "model"; a third-party "torch.nn" → "torch"."""
    parts = module.split(".")
    return parts[1] if parts[0] == "attnlab" and len(parts) > 1 else parts[0]


def imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {room(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(room(node.module))
        out[str(path.relative_to(ROOT))] = names
    return out


def test_rooms_are_imported_through_the_namespace():
    """Every import of the project's own code goes through `attnlab.`: a bare `import model` would load a second
    copy of the module (or a user's own model.py)."""
    direct = []
    for folder in (*ROOMS, "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                direct += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in mods if m.split(".")[0] in ROOMS]
    assert direct == []


@pytest.mark.parametrize("folder, forbidden", [
    ("model", {"streamlit", "plotly", "analysis", "app", "pages", *TOOLING}),  # nothing above
    ("analysis", {"streamlit", "plotly", "app", "pages", *TOOLING}),  # model only
    ("app", {"pages", *TOOLING}),  # analysis and model
    ("pages", {"torch", *TOOLING}),  # app, analysis and model; no torch
    ("bench", {"cli", "pages", "lecture"}),  # tooling: every layer (app's pages run through AppTest, not imported)
    ("cli", {"pages"}),  # tooling: every layer, the benchmark and the lecture tooling
    ("lecture", {"streamlit", "pages", "app", "cli", "bench"}),  # training and cards: model and analysis only
])
def test_layers_point_one_way(folder, forbidden):
    found = {f: names & forbidden for f, names in imports(folder).items() if names & forbidden}
    assert found == {}
    assert imports(folder), f"{folder}/ has Python files"


def test_tooling_is_on_top_and_packaged():
    """cli and bench do import the layers below (they are tooling, not a layer); the console script and the
    package map (setup.py's ROOMS) name them, and attnlab is the one top-level name installed."""
    import tomllib

    used = set().union(*imports("cli").values(), *imports("bench").values())
    assert {"model", "analysis", "app", "bench", "lecture"} <= used
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["attnlab"] == "attnlab.cli.main:main"
    setup = ast.parse((ROOT / "setup.py").read_text())
    rooms = next(ast.literal_eval(n.value) for n in setup.body if isinstance(n, ast.Assign) and n.targets[0].id == "ROOMS")
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name not in ("tests", "attnlab")}
    assert packages == set(rooms) == ROOMS | {"sample_texts", "docs"}


@pytest.mark.parametrize("folder", ["model", "analysis", "app", "pages"])
def test_own_modules_are_imported_at_the_top(folder):
    """In the layers, an import of the project's own packages inside a function would hide a cycle: every one
    is at module level. (The tooling imports lazily on purpose: `attnlab --help` loads no torch, and a bench
    worker measures memory from a bare interpreter.)"""
    local = []
    for path in (ROOT / folder).rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                local += [f"{path.relative_to(ROOT)} {m}" for m in mods if m.split(".")[0] == "attnlab"]
    assert set(local) <= OPTIONAL


def test_model_and_analysis_import_with_torch_alone():
    """The GPU machine has torch and transformers but no gguf, streamlit or plotly: every module of model/ and
    analysis/ imports there from a checkout, except the GGUF readers themselves."""
    import subprocess
    import sys

    code = """
import importlib, pkgutil, sys
for m in ("gguf", "streamlit", "plotly"):
    sys.modules[m] = None  # as if not installed
import attnlab.analysis, attnlab.model
NEEDS_GGUF = ("attnlab.model.gguf.",)
names = [m.name for pkg in (attnlab.model, attnlab.analysis)
         for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
names = [n for n in names if not n.startswith(NEEDS_GGUF) or n == "attnlab.model.gguf.smollm2"]
for n in names:
    importlib.import_module(n)
print(len(names))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 100  # every module was walked


def test_analysis_is_grouped_by_job():
    """analysis/ holds no module of its own: each sits in the room of its job (readers of attention, probes that
    run the model, the machinery's measurements, the faithfulness benchmark, circuit discovery), and the readers of
    attention run no model: no torch there."""
    top = sorted(p.name for p in (ROOT / "analysis").glob("*.py") if p.name != "__init__.py")
    rooms = sorted(p.name for p in (ROOT / "analysis").iterdir() if (p / "__init__.py").is_file())
    assert top == [] and rooms == sorted(ANALYSIS_JOBS)
    readers = {f: names & {"torch"} for f, names in imports("analysis/attention").items() if names & {"torch"}}
    assert readers == {}


def test_lecture_tooling_is_above_the_model():
    """Training, evaluation and cards live in lecture/ alone: model/lecture keeps only what a loaded model needs
    (the corpus, tokenizer, tasks, samples, shapes), none of it importing torch."""
    kept = {p.stem for p in (ROOT / "model" / "lecture").glob("*.py")}
    assert not kept & {"train", "train_command", "train_vit", "resume", "batches", "curve", "evaluate",
                       "evaluate_vit", "card", "card_heads", "card_vit", "vit_aux"}
    heavy = {f: names & {"torch"} for f, names in imports("model/lecture").items() if names & {"torch"}}
    assert heavy == {}
    cards = [str(p.relative_to(ROOT)) for room in ROOMS - {"lecture"} for p in (ROOT / room).rglob("*card*.py")]
    assert cards == []  # every model card is written under lecture/cards/


def module_graph() -> dict[str, set[str]]:
    """Every module of the rooms and the project's modules it imports (at any depth of the file, lazily too)."""
    files = {}
    for r in ROOMS | {"attnlab"}:
        for path in (ROOT / r).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            files[".".join(parts if parts[0] == "attnlab" else ["attnlab", *parts])] = path

    def resolve(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph = {m: set() for m in files}
    for m, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [resolve(f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            else:
                continue
            graph[m] |= {t for t in targets if t and t != m}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_circle_between_files():
    """No module reaches itself through imports, lazy ones included (one loader: model/hf/reading.py is what the
    converted loader, the view and the memory estimate read a folder through)."""
    graph = module_graph()
    assert len(graph) > 300 and "attnlab.model.hf.reading" in graph["attnlab.model.view.loaded"]
    assert circles(graph) == []
