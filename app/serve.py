"""How the app is served: `streamlit run` of its entry script with the class server's settings
(app/streamlit_config.toml, passed as flags so that they hold from any working directory)."""

from __future__ import annotations

import sys
import tomllib

from attnlab.data import data_folder

ENTRY = data_folder("app") / "main.py"
CONFIG = data_folder("app") / "streamlit_config.toml"


def config_flags() -> list[str]:
    """["--server.headless", "true", …]: every setting of CONFIG as a command-line flag."""
    with open(CONFIG, "rb") as f:
        table = tomllib.load(f)
    flags = []
    for section, options in table.items():
        for key, value in options.items():
            flags += [f"--{section}.{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


def streamlit_command(host: str, port: int, entry=ENTRY, extra: tuple[str, ...] = (), warm: bool = False) -> list[str]:
    """The command line that serves `entry` (default the app) on host:port with CONFIG's settings; `warm`:
    through app/warm.py, which visits the opening page's presets in the background as the server starts."""
    return [sys.executable, "-m", "attnlab.app.warm" if warm else "streamlit", "run", str(entry), *config_flags(),
            "--server.address", host, "--server.port", str(port), *extra]
