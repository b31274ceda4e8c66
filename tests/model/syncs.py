"""Syncs: a TorchFunctionMode naming every call inside its block that copies a tensor to the host or waits on the
device (.item(), bool(), .tolist(), .cpu(), .numpy(), int(), nonzero, masked_select, unique), with the model file
and line that made it."""

from __future__ import annotations

import traceback

import torch
from attnlab.model import moe
from torch.overrides import TorchFunctionMode

T = torch.Tensor
SYNCS = {T.cpu, T.numpy, T.item, T.tolist, T.__bool__, T.__int__, T.__float__, T.__index__, T.nonzero,
         torch.nonzero, T.masked_select, torch.masked_select, T.unique, torch.unique, torch.argwhere}
# a mixture of experts waits once a layer, here: each expert's batch size comes from the routing
MOE_COUNTS = f"moe.py:{next(i for i, line in enumerate(open(moe.__file__), 1) if 'bincount' in line)}"


class Syncs(TorchFunctionMode):
    """`seen`: "name at file:line" for each call in the block that waits on the device."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in SYNCS:
            self.seen.append(f"{getattr(func, '__name__', func)} at {_caller()}")
        return func(*args, **(kwargs or {}))

    def allowed(self, model) -> list[str]:
        """What a forward of `model` may wait on: one routing count per mixture-of-experts layer, nothing else."""
        moe_layers = sum(isinstance(m, moe.MoE) for m in model.modules())
        return [f"tolist at {MOE_COUNTS}"] * moe_layers


def _caller() -> str:
    """file:line of the model's code that made the call."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/model/" in frame.filename:
            return f"{frame.filename.rsplit('/model/', 1)[1]}:{frame.lineno}"
    return "?"
