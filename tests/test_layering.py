"""Dependencies point one way: pages → app → analysis → model, with the tooling (cli, bench) on top of them all."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLING = {"cli", "bench"}  # the `attnlab` command and the benchmark: may import every layer; none imports them


def room(module: str) -> str:
    """The top name a module path lives under, attnlab's rooms by their own name: 'attnlab.model.hooks' → 'model',
    'torch.nn' → 'torch'."""
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


@pytest.mark.parametrize("folder, forbidden", [
    ("model", {"streamlit", "plotly", "analysis", "app", "pages", *TOOLING}),  # nothing above
    ("analysis", {"streamlit", "plotly", "app", "pages", *TOOLING}),  # model only
    ("app", {"pages", *TOOLING}),  # analysis and model
    ("pages", {"torch", *TOOLING}),  # app, analysis and model; no torch
    ("bench", {"cli", "pages"}),  # tooling: every layer (app's pages run through AppTest, not imported)
    ("cli", {"pages"}),  # tooling: every layer and the benchmark
])
def test_layers_point_one_way(folder, forbidden):
    found = {f: names & forbidden for f, names in imports(folder).items() if names & forbidden}
    assert found == {}
    assert imports(folder), f"{folder}/ has Python files"


def test_tooling_is_on_top_and_packaged():
    """cli and bench do import the layers below (they are tooling, not a layer); the console script and the
    package list name them."""
    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    used = set().union(*imports("cli").values(), *imports("bench").values())
    assert {"model", "analysis", "app", "bench"} <= used
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["attnlab"] == "attnlab.cli.main:main"
    setup = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    rooms = next(ast.literal_eval(n.value) for n in setup.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "ROOMS")  # setup.py maps each room to attnlab.<room>
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name not in ("tests", "attnlab")}
    assert packages == set(rooms) == {"model", "analysis", "app", "pages", "cli", "bench", "sample_texts", "docs"}


@pytest.mark.parametrize("folder", ["model", "analysis", "app", "pages"])
def test_own_modules_are_imported_at_the_top(folder):
    """In the layers, an import of the project's own packages inside a function would hide a cycle: every one
    is at module level. (The tooling imports lazily on purpose: `attnlab --help` loads no torch, and a bench
    worker measures memory from a bare interpreter.)"""
    own = {"model", "analysis", "app", "cli", "bench"}
    optional = {"model/registry.py": "attnlab.model.gguf.cache"}  # gguf is optional: the model layer imports without
    local = []
    for path in (ROOT / folder).rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                local += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in mods if room(m) in own
                          and optional.get(str(path.relative_to(ROOT))) != m]
    assert local == []
