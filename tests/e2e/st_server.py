"""The browser tests' server: bench.server (shared with `attnlab bench --browser`)."""

from attnlab.bench.server import ENTRY, ROOT, free_port, healthy, streamlit_server

__all__ = ["ENTRY", "ROOT", "free_port", "healthy", "streamlit_server"]
