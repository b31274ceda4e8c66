"""Where and in which precision a model runs: the one place that turns `--device` / `--dtype` choices
(auto|cpu|cuda, auto|float32|bfloat16|float16) into a torch device string and dtype.

auto: the CPU runs float32; a CUDA GPU runs bfloat16 (the fused kernels' precision); the checks' float32 eager
reference is built only while a check runs (model.loaded.LoadedModel.reference_model).
"""

from __future__ import annotations

import torch
from attnlab.model.inputs import InputError

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
NO_CUDA = "cuda was asked for but this machine has no CUDA GPU (torch.cuda.is_available() is False)"


def cuda_available() -> bool:
    """True when PyTorch sees a CUDA GPU."""
    return torch.cuda.is_available()


def resolve_device(choice: str | None = "auto") -> str:
    """'cpu' or 'cuda' for a choice; InputError (one line) for cuda without a GPU or an unknown choice."""
    choice = (choice or "auto").strip().lower()
    if choice not in DEVICES:
        raise InputError(f"unknown device {choice!r}; choose one of {', '.join(DEVICES)}")
    if choice == "auto":
        return "cuda" if cuda_available() else "cpu"
    if choice == "cuda" and not cuda_available():
        raise InputError(NO_CUDA)
    return choice


def check_device(device: str | None) -> str | None:
    """A device string a caller passes (the Python API: 'cpu', 'cuda', 'cuda:1', 'auto'), checked before any weight
    moves: None stays None, 'auto' resolves, CUDA without a GPU or a name torch does not know is one InputError."""
    if device is None:
        return None
    device = str(device).strip().lower()
    if device == "auto":
        return resolve_device("auto")
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise InputError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)} (or cuda:N)") from None
    if kind == "cuda" and not cuda_available():
        raise InputError(NO_CUDA)
    return device


def check_dtype(dtype, device: str | None = None) -> torch.dtype | None:
    """A dtype a caller passes (the Python API): None stays None, a floating torch dtype is itself, a name
    ('bfloat16', 'torch.float16', 'auto' for `device`) its torch dtype; anything else one InputError."""
    if dtype is None or isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    name = str(dtype).strip().lower().removeprefix("torch.")
    if isinstance(dtype, str) and name == "float64":
        return torch.float64
    if isinstance(dtype, str) and name in DTYPES:
        return resolve_dtype(name, "cuda" if str(device or "cpu").startswith("cuda") else "cpu")
    raise InputError(f"dtype {dtype!r} is not a floating-point dtype; choose one of {', '.join(DTYPES[1:])} "
                     "(a name or a torch dtype), or auto")


def resolve_dtype(choice: str | None, device: str) -> torch.dtype:
    """The torch dtype for a choice on `device` (a resolved 'cpu' or 'cuda'): auto is float32 on the CPU and
    bfloat16 on CUDA; an explicit choice is taken as is (PyTorch runs all three on both)."""
    choice = (choice or "auto").strip().lower()
    if choice not in DTYPES:
        raise InputError(f"unknown dtype {choice!r}; choose one of {', '.join(DTYPES)}")
    if choice == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return getattr(torch, choice)


def resolve(device: str | None = "auto", dtype: str | None = "auto") -> tuple[str, torch.dtype]:
    """(device, dtype) of two choices, checked together."""
    dev = resolve_device(device)
    return dev, resolve_dtype(dtype, dev)


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16' or 'float16'."""
    return str(dtype).removeprefix("torch.")


def is_half(dtype: torch.dtype) -> bool:
    """True for the 16-bit float dtypes (bfloat16, float16)."""
    return dtype in (torch.bfloat16, torch.float16)
