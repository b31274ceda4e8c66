"""Where this session's models run: the device and dtype (`attnlab app --device/--dtype`, or the sidebar's switch on
a CUDA machine) and how a model is spread (`attnlab app --device-map/--device-memory/--offload-folder`)."""

from __future__ import annotations

import os

import streamlit as st
from attnlab.model.device import cuda_available, dtype_name, resolve
from attnlab.model.dispatch import parse_max_memory

RUN_DEVICE, RUN_DTYPE = "run_device", "run_dtype"  # session keys of the sidebar's switch (CUDA machines only)


def run_settings() -> tuple[str, str]:
    """(device, dtype name) models run with in this session: the sidebar's switch, else ATTNLAB_DEVICE /
    ATTNLAB_DTYPE (set by `attnlab app --device/--dtype`), else auto (cpu and float32 without CUDA)."""
    try:
        ss = st.session_state
        device, dtype = ss.get(RUN_DEVICE), ss.get(RUN_DTYPE)
    except Exception:  # noqa: BLE001 — no session outside a script run (a test calling an entry point)
        device = dtype = None
    dev, dt = resolve(device or os.environ.get("ATTNLAB_DEVICE"), dtype or os.environ.get("ATTNLAB_DTYPE"))
    return dev, dtype_name(dt)


def can_switch_device() -> bool:
    """True where the sidebar offers a device switch: only a machine with a CUDA GPU."""
    return cuda_available()


def placement_settings() -> dict:
    """load()'s device_map, max_memory and offload_folder from ATTNLAB_DEVICE_MAP / ATTNLAB_DEVICE_MEMORY /
    ATTNLAB_OFFLOAD_FOLDER (set by `attnlab app --device-map/--device-memory/--offload-folder`); empty without."""
    device_map = os.environ.get("ATTNLAB_DEVICE_MAP")
    if not device_map:
        return {}
    return {"device_map": device_map, "max_memory": parse_max_memory(os.environ.get("ATTNLAB_DEVICE_MEMORY")),
            "offload_folder": os.environ.get("ATTNLAB_OFFLOAD_FOLDER") or None}
