"""The package map: the repository's rooms (model/, analysis/, app/, pages/, cli/, bench/, lecture/,
sample_texts/, docs/) installed as subpackages of `attnlab`, each with its data files. pyproject.toml holds the rest."""

from pathlib import Path

from setuptools import setup

ROOMS = ("model", "analysis", "app", "pages", "cli", "bench", "lecture", "sample_texts", "docs")


def packages() -> dict[str, Path]:
    """{"attnlab.model.hf": Path("model/hf"), …}: every folder with an __init__.py under a room."""
    found = {"attnlab": Path("attnlab")}
    for room in ROOMS:
        for init in sorted(Path(room).rglob("__init__.py")):
            if "__pycache__" not in init.parts:
                found["attnlab." + ".".join(init.parent.parts)] = init.parent
    return found


def data_files(pkg: Path, subpackages: set[Path]) -> list[str]:
    """The package's files that are not Python, its plain folders included, relative to it."""
    out = []
    for f in sorted(pkg.rglob("*")):
        inner = next((p for p in f.parents if p in subpackages and p != pkg and pkg in p.parents), None)
        if f.is_file() and f.suffix not in (".py", ".pyc") and inner is None and "__pycache__" not in f.parts \
                and "resume" not in f.parts:
            out.append(str(f.relative_to(pkg)))
    return out


PACKAGES = packages()
setup(
    packages=list(PACKAGES),
    package_dir={name: str(path) for name, path in PACKAGES.items() if name.count(".") <= 1},
    package_data={name: data_files(path, set(PACKAGES.values())) for name, path in PACKAGES.items()},
)
