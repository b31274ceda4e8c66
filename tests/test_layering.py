"""Dependencies point one way: pages → app → analysis → model."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


@pytest.mark.parametrize("folder, forbidden", [
    ("model", {"streamlit", "plotly", "analysis", "app", "pages"}),
    ("analysis", {"streamlit", "plotly", "app", "pages"}),
    ("pages", {"torch"}),
])
def test_layers_point_one_way(folder, forbidden):
    found = {f: names & forbidden for f, names in imports(folder).items() if names & forbidden}
    assert found == {}
    assert imports(folder), f"{folder}/ has Python files"
