"""Our own checkpoint folder: config.json (ModelConfig + tokenizer specials), model.safetensors,
tokenizer.json. Safetensors only: nothing is ever unpickled."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from attnlab.model.config import ModelConfig
from attnlab.model.transformer import build_model
from attnlab.model.weights import (
    CheckpointError,
    NoRandomInit,
    assign_weights,
    check_state,
    meta_parameters,
    read_tensors,
    weight_files,
)
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model


def save_folder(model: torch.nn.Module, cfg: ModelConfig, folder: str | Path, tokenizer=None,
                specials: dict | None = None, extra: dict | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"attnlab": cfg.to_dict(), "tokenizer": specials or {}, **(extra or {})}
    (folder / "config.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    save_model(model, str(folder / "model.safetensors"))
    if tokenizer is not None:
        tokenizer.save(folder / "tokenizer.json")
    return folder


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e.msg if hasattr(e, 'msg') else e})") from None


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """Read a safetensors file with a clear message when it is missing, truncated or corrupt."""
    if not path.is_file():
        raise CheckpointError(f"{path.parent} has no {path.name}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable safetensors file (corrupt or truncated?): {e}") from None


def build_for_weights(cfg: ModelConfig) -> torch.nn.Module:
    """build_model(cfg) without drawing random weights (2.4 s of SmolLM2's load): for `load_weights`, which
    checks that every parameter and persistent buffer is given; computed buffers (sinusoids, ALiBi slopes) are
    made as usual."""
    with NoRandomInit():
        return build_model(cfg)


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy `state` into `model`, checking every key and shape (tied weights may appear once)."""
    own = model.state_dict()
    check_state(own, state, [k for k in own if k not in state and not _tied_twin(model, k, state)], where)
    model.load_state_dict(state, strict=False)


def _tied_twin(model, key, state) -> bool:
    """True when `key` is a parameter tied to another key present in `state`."""
    params = dict(model.named_parameters(remove_duplicate=False))
    p = params.get(key)
    return p is not None and any(q is p and k in state for k, q in params.items() if k != key)


def load_folder(folder: str | Path, dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, ModelConfig, dict]:
    """Our own folder's model (its weights read from the file into memory of their own, in `dtype`; None: as
    stored), config and config.json."""
    folder = Path(folder)
    meta = read_config(folder)
    if "attnlab" not in meta:
        raise CheckpointError(f"{folder}/config.json is not an attnlab config")
    try:
        cfg = ModelConfig.from_dict(meta["attnlab"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{folder}/config.json: {e}") from None
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError(f"{folder} has no model.safetensors")
    state = read_tensors(weight_files(folder), dtype, copy=True)  # small, and retrained in place: not mapped
    with meta_parameters():
        model = build_model(cfg)
    return assign_weights(model, state, str(folder), dtype or _floating_dtype(state)), cfg, meta


def _floating_dtype(state: dict[str, torch.Tensor]) -> torch.dtype | None:
    return next((t.dtype for t in state.values() if t.is_floating_point()), None)
