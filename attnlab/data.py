"""attnlab's data folders (pages, sample texts, docs, bundled checkpoints) wherever attnlab is installed."""

from importlib.resources import files
from pathlib import Path


def data_folder(package: str) -> Path:
    """The folder of the package `attnlab.<package>`, e.g. data_folder("sample_texts"), data_folder("model.lecture")."""
    return Path(str(files(f"attnlab.{package}")))
