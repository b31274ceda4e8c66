"""A model spread over devices, CPU memory and disk: `device_map` through accelerate's dispatch.

`Placement` is what `al.load(..., device_map="auto", max_memory={...}, offload_folder=DIR)`, the CLI's
`--device-map/--device-memory/--offload-folder` and `attnlab app --device-map` ask for. Our converted model is
split at its blocks (a block never straddles two devices) and dispatched with `accelerate.dispatch_model`:
each block runs where its weights are, weights offloaded to disk are read in for their block's forward, and
the outputs come back to the device the inputs came from. A transformers view passes the same placement to
`from_pretrained`. Records are copied to the host when read (model/record.py), wherever their site ran.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.inputs import InputError

AUTO_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
NO_SPLIT = ["Block"]  # model.layers.Block: attention and MLP of one layer stay together


@dataclass(frozen=True)
class Placement:
    """Where a model's weights go: a device_map ("auto" or {module: device}), the most memory per device
    ({0: "20GiB", "cpu": "30GiB"}) and the folder for weights that fit nowhere (disk offload)."""

    device_map: str | dict = "auto"
    max_memory: dict | None = None
    offload_folder: str | None = None

    def __post_init__(self):
        if isinstance(self.device_map, str) and self.device_map not in AUTO_MAPS:
            raise InputError(f"unknown device map {self.device_map!r}; choose one of {', '.join(AUTO_MAPS)} "
                             "or give a {module: device} dict")

    def from_pretrained_kwargs(self) -> dict:
        """The same placement as transformers' from_pretrained arguments (a view)."""
        kw = {"device_map": self.device_map, "max_memory": self.max_memory}
        return kw | ({"offload_folder": self.offload_folder} if self.offload_folder else {})


def placement(device_map=None, max_memory: dict | None = None, offload_folder: str | None = None) -> Placement | None:
    """A Placement, or None when no device_map is asked (max_memory / offload_folder alone are refused)."""
    if device_map is None:
        if max_memory or offload_folder:
            raise InputError("--device-memory and --offload-folder need --device-map (e.g. --device-map auto)")
        return None
    return Placement(device_map, max_memory, str(offload_folder) if offload_folder else None)


def parse_max_memory(text: str | None) -> dict | None:
    """'0=20GiB,cpu=60GiB' → {0: '20GiB', 'cpu': '60GiB'} (GPU indices as ints); None for empty text."""
    if not text or not text.strip():
        return None
    out: dict = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise InputError(f"--device-memory takes DEVICE=SIZE pairs separated by commas (0=20GiB,cpu=60GiB), "
                             f"not {part.strip()!r}")
        out[int(key) if key.isdigit() else key] = value
    return out


def dispatch(model: torch.nn.Module, where: Placement, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """`model` (its weights loaded on the CPU) spread as `where` says, every floating weight and buffer cast to
    `dtype` (None: the first parameter's) one tensor at a time as it is placed; sets model.hf_device_map.
    InputError (one line) when the map needs disk and no offload folder was given, or accelerate is missing."""
    try:
        from accelerate import dispatch_model, infer_auto_device_map
        from accelerate.utils import get_balanced_memory
    except ImportError:
        raise InputError("a device map needs the package accelerate (pip install accelerate)") from None
    dtype = dtype or next(model.parameters()).dtype
    device_map = where.device_map
    if isinstance(device_map, str):
        max_memory = where.max_memory
        if device_map != "sequential":
            max_memory = get_balanced_memory(model, max_memory, no_split_module_classes=NO_SPLIT, dtype=dtype,
                                             low_zero=device_map == "balanced_low_0")
        device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=NO_SPLIT,
                                           dtype=dtype)
    if device_map.get("") == "disk":
        raise InputError("--device-memory leaves no room for even the embeddings in memory; raise it")
    if "disk" in device_map.values() and not where.offload_folder:
        raise InputError("the model does not fit in --device-memory; give --offload-folder DIR for the rest (disk)")
    index = place_tensors(model, device_map, dtype, where.offload_folder)
    dispatch_model(model, device_map, offload_dir=where.offload_folder, offload_index=index)
    model.hf_device_map = dict(device_map)
    return model


def place_tensors(model: torch.nn.Module, device_map: dict, dtype: torch.dtype, folder: str | None) -> dict | None:
    """Every parameter and floating buffer of `model` in `dtype`, one tensor at a time: a parameter of a module the
    map sends to disk is cast straight into its file in `folder` (accelerate's offload format, replacing what the
    folder held; no copy in memory) and left on the meta device before the next is read; the rest are cast in
    memory. A tied parameter stays one parameter. Returns the offload index (None when nothing goes to disk)."""
    disk = [m for m, d in device_map.items() if d == "disk"]
    if disk:
        os.makedirs(folder, exist_ok=True)
    index: dict = {}
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        p = model.get_parameter(names[0])
        to = dtype if p.is_floating_point() else p.dtype
        to_disk = [n for n in names if any(n.startswith(m + ".") for m in disk)]
        for n in to_disk:
            index[n] = write_offloaded(p.detach(), to, os.path.join(folder, f"{n}.dat"))
        if len(to_disk) == len(names):  # nothing in memory uses it: its source is released now
            kept = torch.empty(p.shape, dtype=to, device="meta")
        else:
            kept = p.detach().to(to)
        new = torch.nn.Parameter(kept, requires_grad=p.requires_grad)
        del p, kept
        for n in names:
            owner, _, attr = n.rpartition(".")
            setattr(model.get_submodule(owner), attr, new)
    for module in model.modules():
        for name, b in module.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(module, name, b.to(dtype))
    if not disk:
        return None
    from accelerate.utils import save_offload_index

    save_offload_index(index, folder)
    return index


def write_offloaded(t: torch.Tensor, dtype: torch.dtype, path: str) -> dict:
    """`t` cast to `dtype` straight into the file `path` (raw, as accelerate's offload_weight writes it: numpy
    has no bfloat16, so its bits as int16), with no copy in memory; the offload index's entry."""
    bits = dtype == torch.bfloat16
    np_dtype = np.dtype(np.int16) if bits else torch.empty(0, dtype=dtype).numpy().dtype
    arr = np.memmap(path, dtype=np_dtype, mode="w+", shape=tuple(t.shape) or (1,))  # a 0-d tensor as [1]
    dst = torch.from_numpy(arr)
    (dst.view(torch.bfloat16) if bits else dst).view(t.shape).copy_(t)  # copy_ casts as it writes
    arr.flush()
    del dst, arr
    return {"dtype": "bfloat16" if bits else str(np_dtype), "shape": list(t.shape)}


def main_device(device_map: dict) -> str:
    """'cuda' when any part of the model runs on a GPU, else 'cpu' (disk-offloaded weights run on the CPU)."""
    gpu = any(isinstance(d, int) or str(d).startswith("cuda") for d in device_map.values())
    return "cuda" if gpu else "cpu"
