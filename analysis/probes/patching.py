"""Activation patching (Meng et al. 2022; Wang et al. 2023): run the corrupted prompt with one activation taken
from the clean run, and measure the share of the clean–corrupted logit difference it restores,

    restored = (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt),  LD = logit(answer) − logit(wrong)

at the last position. Three sweeps: the residual stream entering each block per (layer, position); each head's
output (hook_z, every position) per (layer, head); each head per position for chosen layers.

Batched as a staircase: the runs patched at block l start there from the corrupted stream (nothing before it
changes), and all runs go through the blocks together — block l carries every run that started at or before l.
One block of one staircase is a slice: `on_step(done, total)` is called after each (the app's jobs release the
inference lock there, report progress and stop when cancelled); the numbers are the same with or without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from attnlab.analysis.probes.readout import check_row, prompt_pair
from attnlab.model.inputs import InputError

MAX_TOKENS = 64  # prompt length a patching sweep accepts
ROW_TOKENS = 16_384  # runs × tokens per staircase (bounds the batch's memory)
HEAD_POS_RUNS = 2_000  # head × position runs done for every layer when the model is this small


@dataclass
class Patching:
    model: str
    clean: list[str]
    corrupt: list[str]
    answer: str
    wrong: str
    ld_clean: float
    ld_corrupt: float
    resid: np.ndarray  # [L, T] restored share, the stream entering block l at position p
    heads: np.ndarray  # [L, H] restored share, head h's output at every position
    head_pos: dict[int, np.ndarray] = field(default_factory=dict)  # layer → [H, T]
    all_restored: float = float("nan")  # the clean stream entering block 0 at every position (1 exactly)
    seconds: dict[str, float] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        def r(a):
            return np.round(np.asarray(a, dtype=float), 5).tolist()

        return {"model": self.model, "clean": self.clean, "corrupt": self.corrupt, "answer": self.answer,
                "wrong": self.wrong, "ld_clean": r(self.ld_clean), "ld_corrupt": r(self.ld_corrupt),
                "resid": r(self.resid), "heads": r(self.heads),
                "head_pos": {str(k): r(v) for k, v in self.head_pos.items()},
                "all_restored": r(self.all_restored), "runs": self.runs,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


class _Setup:
    """Both prompts' cached streams and head outputs, and the logit-difference readout."""

    def __init__(self, lm, clean: str, corrupt: str, answer: str, wrong: str, backend: str):
        if not lm.predicts_next_token:
            raise InputError(f"{lm.name} is not a decoder-only model; activation patching here runs decoders")
        self.ro = ro = lm.readout(need_linear=True)
        head = ro.head
        a, b, ci, xi = prompt_pair(lm, clean, corrupt, answer, wrong, "a patching sweep", MAX_TOKENS)
        T = ci.ids.shape[1]
        self.lm, self.a, self.b, self.T, self.backend = lm, a, b, T, backend
        self.tokens = (list(ci.tokens), list(xi.tokens))
        self.direction = ro.direction(a) - ro.direction(b)  # [D]
        self.bias = 0.0 if head.bias is None else float((head.bias[a] - head.bias[b]).detach())
        self.z_names = ro.block_hooks("attn.hook_z")
        self.resid, self.z, self.ld = {}, {}, {}
        for key, inp in (("clean", ci), ("corrupt", xi)):
            fwd = lm.forward(inp, backend=backend, names=ro.resid_names + self.z_names, records=False)
            t = fwd.capture.tensor
            self.resid[key] = [t(n) for n in ro.resid_names[:-1]]  # L × [1, T, D]
            self.z[key] = [t(n) for n in self.z_names]  # L × [1, T, H, d]
            self.ld[key] = float(self.read(t(ro.resid_names[-1])[:, -1])[0])
        self.gap = self.ld["clean"] - self.ld["corrupt"]
        if abs(self.gap) < 1e-6 * max(1.0, abs(self.ld["clean"])):
            raise InputError("the clean and corrupted prompts give the same logit difference; nothing to restore")
        self.ctx = ro.contexts(T, backend, device=self.direction.device)
        self.on_step, self.done, self.total = None, 0, 0

    def tick(self) -> None:
        """One block of one staircase done: on_step(done, total)."""
        self.done += 1
        if self.on_step is not None:
            self.on_step(self.done, self.total)

    @torch.no_grad()
    def read(self, x_last: torch.Tensor) -> torch.Tensor:
        """The logit difference [N] of final streams at the last position [N, D] (before any logit soft cap):
        the one readout of the clean, corrupted and patched runs."""
        return self.ro.norm(x_last) @ self.direction + self.bias

    def restored(self, ld: torch.Tensor) -> np.ndarray:
        return ((ld.double() - self.ld["corrupt"]) / self.gap).cpu().numpy()

    @torch.no_grad()
    def staircase(self, entering: list[torch.Tensor | None], z_fix: list | None = None) -> torch.Tensor:
        """entering[l]: [n_l, T, D] streams of the runs that start at block l (None: none). z_fix[l](z, n_l): block
        l's head outputs of those last n_l runs patched. Logit differences [Σ n_l], runs in layer order."""
        x = None
        for i, new in enumerate(entering):
            if new is not None:
                x = new if x is None else torch.cat([x, new])  # [N_active, T, D]
            if x is not None:
                fix = z_fix[i] if z_fix is not None and new is not None else None
                patch = None if fix is None else \
                    {self.z_names[i]: lambda z, name, n=new.shape[0], fix=fix: fix(z, n)}
                x = self.ro.run_from(i, x, i + 1, contexts=self.ctx, interventions=patch)  # block i alone
            self.tick()
        return self.read(x[:, -1])  # [N]


def _chunks(n: int, per: int) -> list[range]:
    return [range(i, min(i + per, n)) for i in range(0, n, per)]


def _per(n_layers: int, T: int) -> int:
    """Runs per staircase when each of `n_layers` layers starts runs of T tokens (ROW_TOKENS in all)."""
    return max(1, ROW_TOKENS // (n_layers * T))


def patch_resid(s: _Setup) -> np.ndarray:
    """[L, T]: the clean stream entering block l at position p, into the corrupted run."""
    L, T = s.ro.n_blocks, s.T
    out = np.zeros((L, T))
    for ps in _chunks(T, _per(L, T)):
        entering = []
        for i in range(L):
            x = s.resid["corrupt"][i].expand(len(ps), -1, -1).clone()  # [n, T, D]
            for r, p in enumerate(ps):
                x[r, p] = s.resid["clean"][i][0, p]
            entering.append(x)
        out[:, ps.start:ps.stop] = s.restored(s.staircase(entering)).reshape(L, len(ps))
    return out


def _z_runs(s: _Setup, layers: list[int], cells: list[tuple[int, int | None]]) -> np.ndarray:
    """Restored share [len(layers), len(cells)] patching head h's output (at position p, or every position when
    p is None) at each of `layers`, one run per (layer, cell)."""
    L, T = s.ro.n_blocks, s.T
    out = np.zeros((len(layers), len(cells)))
    for cs in _chunks(len(cells), _per(len(layers), T)):
        entering, fixes = [None] * L, [None] * L
        for i in layers:
            entering[i] = s.resid["corrupt"][i].expand(len(cs), -1, -1).contiguous()  # [n, T, D]

            def fix(z, n, i=i, cs=cs):
                z = z.clone()
                clean = s.z["clean"][i][0]  # [T, H, d]
                for r, c in enumerate(cs):
                    h, p = cells[c]
                    row = z.shape[0] - n + r
                    if p is None:
                        z[row, :, h] = clean[:, h]
                    else:
                        z[row, p, h] = clean[p, h]
                return z

            fixes[i] = fix
        out[:, cs.start:cs.stop] = s.restored(s.staircase(entering, fixes)).reshape(len(layers), len(cs))
    return out


def activation_patching(lm, clean: str, corrupt: str, answer: str, wrong: str, *, layers: list[int] | None = None,
                        backend: str = "sdpa", on_step: Callable[[int, int], None] | None = None) -> Patching:
    """Every sweep of the module docstring. `layers`: the layers of the head × position sweep (default: all
    when that is at most HEAD_POS_RUNS runs, else the layer of the head that restores most). `on_step(done,
    total)`: called after each slice (one block of one staircase), done = 1 … total."""
    t0 = time.perf_counter()
    s = _Setup(lm, clean, corrupt, answer, wrong, backend)
    L, H, T = s.ro.n_blocks, lm.cfg.n_heads, s.T
    layers = [check_row(i, L) for i in layers] if layers else None
    n_hp = len(layers) if layers else (L if L * H * T <= HEAD_POS_RUNS else 1)  # layers of the head × position sweep
    stairs = 1 + len(_chunks(T, _per(L, T))) + len(_chunks(H, _per(L, T))) + len(_chunks(H * T, _per(n_hp, T)))
    s.on_step, s.total = on_step, stairs * L
    sec, runs = {"setup": time.perf_counter() - t0}, {}
    t = time.perf_counter()
    entering = [s.resid["clean"][0]] + [None] * (L - 1)
    everything = float(s.restored(s.staircase(entering))[0])
    t = time.perf_counter()
    resid = patch_resid(s)
    sec["resid"], runs["resid"] = time.perf_counter() - t, L * T
    t = time.perf_counter()
    heads = _z_runs(s, list(range(L)), [(h, None) for h in range(H)])
    sec["heads"], runs["heads"] = time.perf_counter() - t, L * H
    if layers is None:
        layers = list(range(L)) if L * H * T <= HEAD_POS_RUNS else [int(np.abs(heads).max(1).argmax())]
    t = time.perf_counter()
    hp = _z_runs(s, layers, [(h, p) for h in range(H) for p in range(T)])
    sec["head_pos"], runs["head_pos"] = time.perf_counter() - t, len(layers) * H * T
    sec["total"] = time.perf_counter() - t0
    return Patching(lm.name, *s.tokens, lm.label(s.a), lm.label(s.b), s.ld["clean"], s.ld["corrupt"], resid, heads,
                    {i: hp[k].reshape(H, T) for k, i in enumerate(layers)}, everything, sec, runs)
