"""The browser tests' server: bench.server (shared with `attnlab bench --browser`)."""

from pathlib import Path

from attnlab.bench.server import ENTRY, free_port, healthy, streamlit_server

ROOT = Path(__file__).resolve().parents[2]  # the checkout: artifacts/ go here

__all__ = ["ENTRY", "ROOT", "free_port", "healthy", "streamlit_server"]
