"""Every capability a page asks for is a field of model.capabilities.Capabilities; a misspelt one fails loudly."""

import ast
from pathlib import Path

import pytest
from attnlab.app import inputs
from attnlab.model.capabilities import Capabilities

ROOT = Path(__file__).resolve().parent.parent.parent


def asked() -> list[tuple[str, str]]:
    """(file:line, name) of each capability named in a page's require((…), …) or lacks(model, "…", …)."""
    out = []
    for path in sorted((ROOT / "pages").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or getattr(node.func, "id", None) not in ("require", "lacks"):
                continue
            arg = node.args[0] if node.func.id == "require" else node.args[1]
            names = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            out += [(f"{path.name}:{node.lineno}", n.value) for n in names if isinstance(n, ast.Constant)]
    return out


def test_pages_ask_only_for_capabilities_that_exist():
    found = asked()
    assert len(found) >= 15  # 18 today: require() on 12 pages, lacks() on 6 sections
    assert [(where, n) for where, n in found if n not in Capabilities.names()] == []


def test_an_unknown_name_fails_before_the_page_runs():
    with pytest.raises(ValueError, match="unknown capability 'internal'"):
        inputs.require(("internal",), "reads the model")
    with pytest.raises(ValueError, match="unknown capability 'has_kq'"):
        inputs.lacks("lecture-decoder", "has_kq", "reads q and k")
    assert set(inputs.CONVERTED_ONLY) < set(Capabilities.names())
    assert {c for caps in inputs.ARCH_CAPS.values() for c in caps} == {"next_token", "reads_source", "generates"}
