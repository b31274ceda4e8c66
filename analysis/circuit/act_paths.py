"""EAP-IG over activations (Marks et al. 2024; EAP-IG-activations in Hanna et al.'s code): each sender's edges
take the gradient averaged over runs in which only that sender's group — the embeddings, one layer's heads, one
layer's MLP — moves on the straight line from its clean to its corrupted activation, everything upstream clean and
everything downstream recomputed:

    score(u → v) = (a_u(corrupt) − a_u(clean)) · mean_β ∂M/∂(input of v) |_{group(u) = clean + β·(corrupt − clean)}

at the midpoints β = (k + ½)/m. A head's outgoing sum is then the integrated gradient of M along its own output's
path, so it estimates what exact activation patching of that head's output measures: M(the clean run with that
output corrupted) − M(clean) (its layer's other heads move with it on the path; an exact identity for the whole
group, as m grows). The path over the input embeddings (scores.edge_scores with runs.gradients) instead moves every
activation at once and spreads the whole clean–corrupted difference over the senders.

Each run starts at its group's block from the clean stream entering it, so a group of layer L costs the blocks from
L on (a staircase, as analysis/probes/patching.py runs its sweeps).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from attnlab.analysis.circuit.runs import Runs
from attnlab.model import hooks
from attnlab.model.inputs import Inputs
from attnlab.model.loaded import BEFORE_FORWARD

CHUNK_ROWS = 24  # path runs per forward/backward (a staircase), at most


def groups(runs: Runs) -> list[tuple[int, range, str | None]]:
    """(block the group's runs start at, its senders, the hook whose value moves; None: the stream entering block
    0, i.e. the embeddings), in block order."""
    g, out = runs.graph, [(0, range(0, 1), None)]
    for L, blk in enumerate(runs.blocks):
        out.append((L, range(g.sender(L, 0), g.sender(L, 0) + g.n_heads), f"{blk.attn.site}.hook_result"))
        out.append((L, range(g.sender(L), g.sender(L) + 1), f"{blk.site}.hook_mlp_out"))
    return out


@torch.no_grad()
def _streams(runs: Runs) -> list[torch.Tensor]:
    """The clean stream entering each block, L × [T, D]."""
    names = [f"{blk.site}.hook_resid_pre" for blk in runs.blocks]
    t = runs.lm.forward(runs.clean, names=names, records=False).capture.tensor
    return [t(n)[0].float() for n in names]


def _metric(runs: Runs, x_last: torch.Tensor) -> torch.Tensor:
    """M [N] of final streams at the last position [N, D], as the model turns them into logits."""
    logits = runs.lm.readout().logits(x_last).float()  # [N, V]
    return logits[:, runs.a] - logits[:, runs.b]


def _chunk(runs: Runs, rows: list[tuple[int, float]], found: list[tuple[int, range, str | None]],
           streams: list[torch.Tensor], scores: torch.Tensor) -> None:
    """One staircase over `rows` (group index, β), ordered by their group's block: adds each group's edge scores,
    the mean over its rows (÷ its row count is applied by the caller), into scores [S, R]."""
    acts, blocks, dev = runs.acts, runs.blocks, streams[0].device
    diff = acts["corrupt"] - acts["clean"]  # [S, T, D]
    start = [found[gi][0] for gi, _ in rows]
    shift = torch.zeros(len(rows), device=dev)  # β of each row at the hook its group moves
    moves: dict[str, list[int]] = {}
    for r, (gi, beta) in enumerate(rows):
        shift[r] = beta
        moves.setdefault(found[gi][2], []).append(r)

    def move(hook: str, senders: range):
        def fn(x, name):
            w = torch.zeros(x.shape[0], device=dev)
            idx = [r for r in moves[hook] if r < x.shape[0]]
            w[idx] = shift[idx]
            d = diff[senders.start:senders.stop]  # [s, T, D]
            d = d.permute(1, 0, 2) if x.dim() == 4 else d[0]  # heads: [T, H, D]; MLP: [T, D]
            return x + (w.view(-1, *[1] * (x.dim() - 1)) * d).to(x.dtype)
        return fn

    probes: dict[str, tuple[torch.Tensor, int, bool]] = {}

    def probe(first: int, per_head: bool):
        def fn(x, name):
            p = torch.zeros_like(x, requires_grad=True)
            probes[name] = (p, first, per_head)
            return x + p
        return fn

    fixes = {hook: move(hook, s) for _, s, hook in found if hook is not None and hook in moves}
    for name, first, per_head, _ in runs.receiver_hooks():
        fixes[name] = probe(first, per_head)
    ctx = runs.lm.model.blocks_ctx(streams[0].shape[0], "eager", device=dev)
    x = None
    with torch.enable_grad(), hooks.capture(interventions=fixes, records=False, detach=False, split_inputs=True):
        for L in range(min(start), len(blocks)):
            new = [r for r, s in enumerate(start) if s == L]
            if new:
                enter = streams[L].expand(len(new), -1, -1).clone()  # [n, T, D]
                for j, r in enumerate(new):
                    if found[rows[r][0]][2] is None:  # the embeddings' group moves the stream itself
                        enter[j] += rows[r][1] * diff[0]
                enter = enter.to(runs.lm.dtype)
                x = enter if x is None else torch.cat([x, enter])  # [N, T, D]
            x = blocks[L](x, ctx[L])
        m = _metric(runs, x[:, -1])
        names = list(probes)
        grads = torch.autograd.grad(m.sum(), [probes[n][0] for n in names])
    for name, g in zip(names, grads):
        _, first, per_head = probes[name]
        g = g.float()
        for gi in sorted({gi for gi, _ in rows}):
            idx = [r for r, (gj, _) in enumerate(rows) if gj == gi and r < g.shape[0]]
            if not idx:  # the group's runs start after this receiver's block
                continue
            s = found[gi][1]
            gm = g[idx].sum(0)  # [T, n, D] or [T, D]
            d = diff[s.start:s.stop]  # [s, T, D]
            if per_head:
                scores[s.start:s.stop, first:first + gm.shape[1]] += torch.einsum("std,tnd->sn", d, gm)
            else:
                scores[s.start:s.stop, first] += torch.einsum("std,td->s", d, gm)


def activation_scores(runs: Runs, betas: list[float], on_chunk: Callable[[], None] | None = None) -> np.ndarray:
    """float64 [S, R]: every edge's EAP-IG-activations score (module docstring), with the path points `betas`;
    0 where the sender is not upstream of the receiver. `on_chunk()` after each staircase."""
    found = groups(runs)
    rows = [(gi, b) for gi in range(len(found)) for b in betas]  # block order: each staircase starts late
    widest = Inputs(runs.clean.ids.expand(min(len(rows), CHUNK_ROWS), -1), runs.clean.tokens)  # [n, T]
    for check in BEFORE_FORWARD:  # a staircase holds at most this batch through every block (an InputError if not)
        check(runs.lm, widest, "eager", grad=True, patterns=False)
    streams = _streams(runs)
    scores = torch.zeros(len(runs.graph.senders), len(runs.graph.receivers), dtype=torch.float64,
                         device=streams[0].device)  # [S, R]
    for i in range(0, len(rows), CHUNK_ROWS):
        _chunk(runs, rows[i:i + CHUNK_ROWS], found, streams, scores)
        if on_chunk is not None:
            on_chunk()
    return (scores / len(betas) * runs.valid).cpu().numpy()


def n_chunks(runs: Runs, steps: int) -> int:
    """Staircases activation_scores runs for `steps` path points."""
    return -(-len(groups(runs)) * steps // CHUNK_ROWS)
