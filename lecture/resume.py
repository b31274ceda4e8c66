"""A training run's resumable state in its output folder: resume/state.safetensors (model weights and the
optimizer's tensors) and resume/state.json (step, losses, learning curve, the optimizer's groups).

Safetensors and JSON only, nothing pickled. The data order is a pure function of the step (see
`train.batches_from`), so no random-number state needs saving.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

STATE = "resume"


def state_dir(out: str | Path) -> Path:
    return Path(out) / STATE


def save_state(out: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer, info: dict) -> Path:
    """Write the state atomically enough: tensors first, then the JSON that marks them complete."""
    folder = state_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    sd = opt.state_dict()
    tensors = {f"model.{k}": v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    for i, s in sd["state"].items():
        for k, v in s.items():
            tensors[f"opt.{i}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().to("cpu", copy=True).contiguous()
    save_file(tensors, str(folder / "state.safetensors"))
    meta = {**info, "param_groups": sd["param_groups"]}
    tmp = folder / "state.json.tmp"
    tmp.write_text(json.dumps(meta) + "\n")
    tmp.replace(folder / "state.json")
    return folder


def has_state(out: str | Path) -> bool:
    return (state_dir(out) / "state.json").is_file()


def load_state(out: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """Restore model and optimizer in place; return the saved info (step, losses, curve...)."""
    folder = state_dir(out)
    if not has_state(out):
        raise FileNotFoundError(f"no training state to resume in {folder} (run without --resume first)")
    meta = json.loads((folder / "state.json").read_text())
    tensors = load_file(str(folder / "state.safetensors"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    return meta
