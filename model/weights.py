"""Weights straight from safetensors files into a model, in the dtype asked, with no second copy.

Each tensor is memory-mapped on its own (`mapped_tensors`: safetensors checks the file, its header is read
once, each tensor maps its own bytes): a tensor kept in the file's dtype stays a view of the file (its pages
are read when first used, as transformers does), a tensor cast to another dtype is converted alone and its
mapping dropped, and a tensor a converter derives (a fused qkv, a transpose) releases its source's pages once
the converter returns; a checkpoint storing q, k, v apart keeps them apart (ModelConfig.qkv_layout "split"), so
only GPT-2's transposed Conv1D weights and GPT-NeoX's per-head qkv rows are derived.
The module is built with its parameters on the meta device and takes the tensors themselves
(`load_state_dict(assign=True)`), so loading touches at most the weights in the target dtype plus the tensors a
converter derives.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import shutil
import struct
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from torch.overrides import TorchFunctionMode


class CheckpointError(ValueError):
    """A model folder that cannot be loaded; the message says why and what to do."""


def check_state(own: dict, state: dict, missing: list[str], where: str) -> None:
    """CheckpointError unless `state` names exactly the model's tensors (`missing`: those it lacks, ties allowed for)
    with the model's shapes."""
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise CheckpointError(
            f"{where}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for k, v in state.items():
        if own[k].shape != v.shape:
            raise CheckpointError(f"{where}: {k} has shape {tuple(v.shape)}, the config needs {tuple(own[k].shape)}")


class NoRandomInit(TorchFunctionMode):
    """Random fills (Tensor.uniform_ / normal_ and torch.nn.init's random initialisers, which handle a mode
    before their inner fill) leave their tensor as it is, in this thread only, while active."""

    SKIP = frozenset({torch.Tensor.uniform_, torch.Tensor.normal_} | {
        getattr(torch.nn.init, f) for f in ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_",
                                            "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "orthogonal_")})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SKIP:
            return args[0] if args else kwargs["tensor"]  # torch.nn.init hands its tensor over by keyword
        return func(*args, **(kwargs or {}))

SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
STORED_DTYPES = SAFETENSORS_DTYPES | {"I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                                     "U8": torch.uint8, "BOOL": torch.bool}
NUMPY_CODES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
               np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}
COPY_CHUNK = 16 * 2**20


def weight_files(folder: Path) -> dict[str, Path]:
    """{tensor name: its safetensors file} of a folder (model.safetensors, or the index's shards), or {} when
    the folder has neither."""
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return {k: single for k in _keys(single)}
    if not index.is_file():
        return {}
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {k: str(f) for k, f in weight_map.items()}
    except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{index} is not a valid safetensors index ({e})") from None
    for f in sorted(set(files.values())):
        if Path(f).name != f or not f.endswith(".safetensors"):
            raise CheckpointError(f"{index} names {f!r}, not a safetensors file in the folder")
        if not (folder / f).is_file():
            raise CheckpointError(f"{folder} has no {f} (named by {index.name})")
    return {k: folder / f for k, f in files.items()}


def _keys(path: Path) -> list[str]:
    try:
        with safe_open(str(path), "pt") as f:
            return list(f.keys())
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable safetensors file (corrupt or truncated?): {e}") from None


def stored_dtype(files: dict[str, Path]) -> torch.dtype | None:
    """The floating dtype holding most of the weights' elements (a checkpoint's own precision), or None."""
    counts: Counter = Counter()
    for path in set(files.values()):
        try:
            with safe_open(str(path), "pt") as f:
                for k in f.keys():
                    s = f.get_slice(k)
                    dt = SAFETENSORS_DTYPES.get(s.get_dtype())
                    if dt is not None:
                        counts[dt] += _numel(s.get_shape())
        except (SafetensorError, OSError, ValueError):
            return None
    return counts.most_common(1)[0][0] if counts else None


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def read_tensors(files: dict[str, Path], dtype: torch.dtype | None = None, copy: bool = False,
                 matrices_as_stored: bool = False) -> dict[str, torch.Tensor]:
    """Every tensor of `files`, floating ones in `dtype` (None: as stored), each mapped on its own; `copy`
    takes each into memory of its own (a file this program itself rewrites, such as a bundled checkpoint
    retrained in place, must not stay mapped); `matrices_as_stored` leaves tensors of 2+ dims in the file's dtype,
    mapped, for a caller that casts them one at a time later (a converter only moves matrices, never computes on
    them, so casting after conversion gives the same values)."""
    by_file: dict[Path, list[str]] = {}
    for key, path in files.items():
        by_file.setdefault(path, []).append(key)
    out = {}
    for path, keys in by_file.items():
        for key, t in zip(keys, mapped_tensors(path, keys)):
            later = matrices_as_stored and t.dim() >= 2
            cast = t.to(dtype) if dtype is not None and t.is_floating_point() and not later else t
            out[key] = cast.clone() if copy and cast is t else cast
    return {k: out[k] for k in files}


def mapped_tensors(path: Path, keys: list[str]) -> list[torch.Tensor]:
    """`keys` of one safetensors file, each a tensor on a private (copy-on-write) mapping of its own bytes: its
    pages are read when first used and released when the tensor is; the header is read once (safetensors checks
    it first)."""
    _keys(path)  # CheckpointError for a file safetensors cannot read (offsets, dtypes and sizes checked)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        out = []
        for key in keys:
            info = header.get(key)
            if info is None:
                raise CheckpointError(f"{path} has no tensor {key} (the folder's index names it there)")
            if info["dtype"] not in STORED_DTYPES:
                raise CheckpointError(f"{path}: {key} is stored as {info['dtype']}, which is not read here "
                                      f"(only {', '.join(STORED_DTYPES)})")
            dtype, shape = STORED_DTYPES[info["dtype"]], info["shape"]
            start, end = info["data_offsets"]
            if end == start:
                out.append(torch.empty(shape, dtype=dtype))
                continue
            begin = 8 + n + start
            base = begin - begin % mmap.ALLOCATIONGRANULARITY  # a mapping starts on a page
            view = mmap.mmap(f.fileno(), begin - base + end - start, offset=base, access=mmap.ACCESS_COPY)
            out.append(torch.frombuffer(view, dtype=dtype, count=_numel(shape), offset=begin - base).view(shape))
    return out

@contextlib.contextmanager
def meta_parameters():
    """Modules built inside get their parameters on the meta device (no memory, no random fill: even on meta,
    torch.nn.init's fills cost seconds the first time); buffers are made as usual (sinusoids, ALiBi slopes are
    computed, not stored)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None and param.device.type != "meta":  # a tie (already on meta) stays the same object
            kind = type(module._parameters[name])
            module._parameters[name] = kind(module._parameters[name].to("meta"), requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = on_meta
    try:
        with NoRandomInit():
            yield
    finally:
        torch.nn.Module.register_parameter = register


def assign_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], where: str,
                   dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Put `state`'s tensors into `model` (built under meta_parameters) as its parameters, checking every key
    and shape; tied parameters stay one parameter. Computed floating buffers follow `dtype`. Returns the model."""
    params = dict(model.named_parameters(remove_duplicate=False))
    groups: dict[int, list[str]] = {}
    for k, p in params.items():
        groups.setdefault(id(p), []).append(k)
    own = model.state_dict(keep_vars=True)
    check_state(own, state, [k for k in own if k not in state and not any(t in state for t in groups.get(id(own[k]), []))],
                where)
    model.load_state_dict(state, strict=False, assign=True)
    for names in groups.values():  # a tie given once (or twice) in `state`: every name holds that one parameter
        given = next(n for n in names if n in state)
        for n in names:
            if n != given:
                _set_parameter(model, n, model.get_parameter(given))
    if dtype is not None:
        model.to(dtype=dtype)  # the computed buffers; parameters already in `dtype` are kept as they are
    return model.eval()


def _set_parameter(model: torch.nn.Module, name: str, param: torch.nn.Parameter) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, attr, param)


def save_streamed(items: Iterable[tuple[str, np.ndarray]], path: Path, metadata: dict | None = None) -> None:
    """A safetensors file written one tensor at a time, so at most one (dequantised) tensor is in memory: the
    data go to a side file as they come, then the header and the data are joined."""
    path = Path(path)
    header: dict = {"__metadata__": metadata} if metadata else {}
    side, offset = path.with_name(path.name + ".data"), 0
    try:
        with open(side, "wb") as data:
            for name, arr in items:
                arr = np.ascontiguousarray(arr)
                data.write(memoryview(arr).cast("B"))
                header[name] = {"dtype": NUMPY_CODES[arr.dtype], "shape": list(arr.shape),
                                "data_offsets": [offset, offset + arr.nbytes]}
                offset += arr.nbytes
        head = json.dumps(header, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)  # the data start 8-byte aligned
        with open(path, "wb") as out, open(side, "rb") as data:
            out.write(struct.pack("<Q", len(head)) + head)
            shutil.copyfileobj(data, out, COPY_CHUNK)
    finally:
        side.unlink(missing_ok=True)
