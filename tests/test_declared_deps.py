"""Every third-party module the package imports (at the top of a file or inside a function) comes with the install:
its distribution is one pyproject.toml declares, or one a declared distribution itself requires. A module that is
only here by chance (another tool's dependency in the development venv) works in the checkout and fails in a
user's venv built from the wheel."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("attnlab", "model", "analysis", "app", "pages", "cli", "bench", "lecture", "sample_texts", "docs")
# imported on purpose without being a dependency, each behind a lazy import that says what to install
OPTIONAL = {"playwright": "bench --browser drives the system chromium through it; the [test] extra installs it"}


def _name(requirement: str) -> str:
    """'websockets>=13' → 'websockets'; 'huggingface-hub<3.0,>=1.31.0' → 'huggingface-hub' (normalised)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower()


# the app's own dependencies: model/ and analysis/ stand without them (the GPU machine has none of them)
APP_ONLY = {"streamlit", "plotly", "kaleido", "websockets"}


def provided(without: set[str] = frozenset()) -> set[str]:
    """The distributions an install of attnlab brings: the declared ones (less `without`) and what they require
    (not their extras)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {_name(r) for r in declared} - without
    for dist in list(out):
        try:
            out |= {_name(r) for r in requires(dist) or [] if "extra ==" not in r}
        except PackageNotFoundError:
            pass
    return out


def third_party_imports(rooms: tuple[str, ...] = ROOMS) -> dict[str, set[str]]:
    """{top-level module: {file:line, …}} for every import of a module outside the standard library and attnlab."""
    found: dict[str, set[str]] = {}
    for room in rooms:
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
                for m in mods:
                    top = m.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "attnlab":
                        found.setdefault(top, set()).add(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_imported_module_comes_with_the_install():
    have, dists = provided(), packages_distributions()
    missing = {m: sorted(where) for m, where in third_party_imports().items()
               if m not in OPTIONAL and not {_name(d) for d in dists.get(m, [])} & have}
    assert missing == {}


def test_the_layers_need_nothing_the_app_alone_brings():
    """model/ and analysis/ run without the app's packages: what they import is declared for itself (Pillow for
    the ViT's images), not present only because Streamlit requires it."""
    have, dists = provided(without=APP_ONLY), packages_distributions()
    missing = {m: sorted(where) for m, where in third_party_imports(("model", "analysis")).items()
               if not {_name(d) for d in dists.get(m, [])} & have}
    assert missing == {}


def test_the_scan_sees_lazy_imports():
    """The scan reads imports inside functions too (most of the tooling imports lazily)."""
    found = third_party_imports()
    assert any(w.startswith("bench/wsclass.py") for w in found["websockets"])  # inside Session._connect
    assert "torch" in found and "streamlit" in found and "os" not in found
