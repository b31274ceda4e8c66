"""Hub ids typed into the app's model box: may this server download them, is one missing here, and the bounded
download itself."""

from __future__ import annotations

import os

import streamlit as st
from attnlab.model import hub
from attnlab.model.registry import resolve as where_is

HUB_MAX_BYTES = int(float(os.environ.get("ATTNLAB_HUB_MAX_GB", "4")) * 1e9)  # the largest download the app starts
LOCAL_ADDRESSES = ("127.0.0.1", "localhost", "::1")
REFUSAL = ("This server does not download models from the Hugging Face hub (it is shared). An administrator adds "
           "one with `attnlab pull ID` on the server (it then appears in the model list), or restarts the app with "
           "`attnlab app --allow-hub`.")


def hub_refusal() -> str | None:
    """None when this server may download hub ids typed into the model box: it was started with `attnlab app
    --allow-hub` (ATTNLAB_ALLOW_HUB=1), or it listens only on this machine (`attnlab app`'s default) and was not
    started with --no-hub (ATTNLAB_ALLOW_HUB=0, a class server behind a proxy). Otherwise the line that says how
    an administrator adds a model."""
    allow = os.environ.get("ATTNLAB_ALLOW_HUB", "")
    if allow in ("0", "1"):
        return None if allow == "1" else REFUSAL
    try:
        address = st.get_option("server.address")
    except Exception:  # noqa: BLE001 — no Streamlit config: treat the address as public
        address = None
    return None if address in LOCAL_ADDRESSES else REFUSAL


def needs_download(name: str) -> bool:
    """True for a hub id that is not in the local Hugging Face cache yet."""
    try:
        return where_is(name.strip())[0] == "hub"
    except Exception:  # noqa: BLE001 — not a model name at all: the page says so when it loads
        return False


def pull(name: str, on_file=None):
    """attnlab.model.hub.pull for the app: bounded by HUB_MAX_BYTES, one download at a time (another waits 1 s, then
    gets a one-line "retry"), config, tokenizer and safetensors files only, never repository code."""
    return hub.pull(name.strip(), max_bytes=HUB_MAX_BYTES, progress=False, on_file=on_file, wait=1.0)
