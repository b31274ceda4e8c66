"""attnlab's data folders (pages, sample texts, docs, bundled checkpoints) wherever attnlab is installed."""

import tomllib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from importlib.resources import files
from pathlib import Path


def data_folder(package: str) -> Path:
    """The folder of the package `attnlab.<package>`, e.g. data_folder("sample_texts"), data_folder("model.lecture")."""
    return Path(str(files(f"attnlab.{package}")))


def version() -> str:
    """attnlab's version: the installed distribution's, else (a checkout nothing installed) pyproject.toml's."""
    try:
        return installed_version("attnlab")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
