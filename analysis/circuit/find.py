"""Circuit discovery on one clean/corrupted pair: score every edge (EAP or EAP-IG), keep the top n by |score|,
and measure the circuit's faithfulness

    faithfulness = (M(circuit) − M(corrupt)) / (M(clean) − M(corrupt)),  M = logit(answer) − logit(wrong)

where in the circuit run every edge outside the circuit carries its sender's corrupted activation (1: the circuit
alone keeps the whole logit difference; 0: none of it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from attnlab.analysis.circuit.act_paths import activation_scores, n_chunks
from attnlab.analysis.circuit.graph import Graph, head_of
from attnlab.analysis.circuit.runs import Runs
from attnlab.analysis.circuit.scores import STEP_BATCH, alphas, edge_scores, mean_gradient
from attnlab.analysis.probes.readout import prompt_pair
from attnlab.model.inputs import InputError

MAX_TOKENS = 128  # prompt length circuit discovery accepts
SHARE = 0.05  # the default circuit: this share of the edges
CURVE_BATCH = 8  # circuit runs per forward, at most
DELTA_BYTES = 2**30  # a batch of circuit runs keeps every sender's difference [S, K, T, D] within this


@dataclass
class Circuit:
    model: str
    method: str
    steps: int  # path points averaged (1 for EAP)
    clean: list[str]
    corrupt: list[str]
    answer: str
    wrong: str
    m_clean: float
    m_corrupt: float
    graph: Graph
    scores: np.ndarray  # float64 [S, R]; 0 where no edge
    n_edges: int  # the circuit's size
    faithfulness: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (edges kept, faithfulness)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def n_edges_total(self) -> int:
        return self.graph.n_edges

    def order(self) -> np.ndarray:
        """Flat indices of every edge, largest |score| first (ties: graph order)."""
        flat = np.flatnonzero(self.graph.valid().ravel())
        return flat[np.argsort(-np.abs(self.scores.ravel()[flat]), kind="stable")]

    def edges(self, n: int | None = None) -> list[dict]:
        """The top n edges (default: the circuit's) as {"from", "to", "score"}."""
        idx = self.order()[: self.n_edges if n is None else n]
        flat = self.scores.ravel()
        return [{"from": u, "to": v, "score": float(flat[i])} for i, (u, v) in zip(idx, self.graph.edge_names(idx))]

    def head_scores(self) -> np.ndarray:
        """[L, H]: each head's summed outgoing score, = (a(corrupt) − a(clean)) · ∂M/∂(its output)."""
        g = self.graph
        out = self.scores.sum(1)  # [S]
        return np.array([[out[g.sender(L, h)] for h in range(g.n_heads)] for L in range(g.n_layers)])

    def heads(self) -> dict[str, float]:
        """`blocks.{L}.attn.head.{H}` → its summed outgoing score."""
        grid = self.head_scores()
        return {f"blocks.{L}.attn.head.{h}": float(grid[L, h]) for L in range(grid.shape[0])
                for h in range(grid.shape[1])}

    def circuit_heads(self) -> list[str]:
        """The heads that send or receive (as a query head) an edge of the circuit, in graph order."""
        found = {head_of(n) for e in self.edges() for n in (e["from"], e["to"])} - {None}
        return [h for h in self.heads() if h in found]

    def to_json(self) -> dict:
        return {"model": self.model, "method": self.method, "steps": self.steps, "clean": self.clean,
                "corrupt": self.corrupt, "answer": self.answer, "wrong": self.wrong,
                "m_clean": round(self.m_clean, 6), "m_corrupt": round(self.m_corrupt, 6),
                "edges": [e | {"score": round(e["score"], 6)} for e in self.edges()],
                "heads": {k: round(v, 6) for k, v in self.heads().items()},
                "faithfulness": round(self.faithfulness, 6), "n_edges": self.n_edges,
                "n_edges_total": self.n_edges_total, "curve": [[n, round(f, 6)] for n, f in self.curve],
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


def setup(lm, clean: str, corrupt: str, answer: str, wrong: str) -> Runs:
    """Check the pair (one line of error each) and run both prompts."""
    graph = Graph.of(lm)
    a, b, ci, xi = prompt_pair(lm, clean, corrupt, answer, wrong, "circuit discovery", MAX_TOKENS)
    runs = Runs(lm, graph, ci.to(lm.device), xi.to(lm.device), a, b)
    gap = runs.m["clean"] - runs.m["corrupt"]
    if abs(gap) < 1e-6 * max(1.0, abs(runs.m["clean"])):
        raise InputError("the clean and corrupted prompts give the same logit difference; nothing to explain")
    return runs


def keep_masks(order: np.ndarray, sizes: list[int], shape: tuple[int, int], device) -> torch.Tensor:
    """bool [len(sizes), S, R]: the top-n edges of `order` for each n."""
    keep = torch.zeros(len(sizes), shape[0] * shape[1], dtype=torch.bool)
    for k, n in enumerate(sizes):
        keep[k, torch.from_numpy(order[:n])] = True
    return keep.view(len(sizes), *shape).to(device)


def curve_batch(runs: Runs) -> int:
    """Circuit runs per forward: CURVE_BATCH, fewer where their differences would pass DELTA_BYTES."""
    return max(1, min(CURVE_BATCH, DELTA_BYTES // (4 * runs.acts["corrupt"].numel())))


def faithfulness_of(runs: Runs, order: np.ndarray, sizes: list[int],
                    on_batch: Callable[[], None] | None = None) -> list[float]:
    """The faithfulness of the top-n circuit for each n in sizes (`on_batch()` after each forward)."""
    shape = (len(runs.graph.senders), len(runs.graph.receivers))
    gap = runs.m["clean"] - runs.m["corrupt"]
    per = curve_batch(runs)
    out = []
    for i in range(0, len(sizes), per):
        m = runs.circuit_m(keep_masks(order, sizes[i:i + per], shape, runs.valid.device))
        out += [(float(x) - runs.m["corrupt"]) / gap for x in m.double().cpu()]
        if on_batch is not None:
            on_batch()
    return out


def curve_sizes(total: int, n: int, points: int = 16) -> list[int]:
    """0, then about `points` sizes spaced evenly in log scale up to every edge, and n."""
    grid = np.unique(np.round(np.geomspace(1, total, points)).astype(int))
    return sorted({0, n, total, *grid.tolist()})


def find_circuit(lm, clean: str, corrupt: str, answer: str, wrong: str, *, method: str = "eap-ig",
                 edges: int | None = None, share: float = SHARE, steps: int | None = None, curve: bool = True,
                 on_step: Callable[[int, int], None] | None = None) -> Circuit:
    """Score every edge and measure the top-`edges` circuit (default: `share` of the edges, at least one);
    `steps`: the path points (default: scores.default_steps(method));
    `curve`: also the faithfulness of circuits from no edge to every edge. `on_step(done, total)`: after each
    slice (one batch of path points, one batch of circuit runs); the numbers are the same with or without it."""
    t0 = time.perf_counter()
    points = alphas(method, steps)
    runs = setup(lm, clean, corrupt, answer, wrong)
    sec = {"setup": time.perf_counter() - t0}
    total = runs.graph.n_edges
    n = max(1, int(share * total)) if edges is None else edges
    if not 0 <= n <= total:
        raise InputError(f"--edges {n} is out of range: this model's graph has {total:,} edges")
    sizes = curve_sizes(total, n) if curve else [n]
    scoring = n_chunks(runs, len(points)) if method == "eap-ig-act" else -(-len(points) // STEP_BATCH)
    done, slices = [0], scoring + -(-len(sizes) // curve_batch(runs))

    def tick():
        done[0] += 1
        if on_step is not None:
            on_step(done[0], slices)

    t = time.perf_counter()
    if method == "eap-ig-act":
        scores = activation_scores(runs, points, tick)
    else:
        scores = edge_scores(runs, mean_gradient(runs, points, tick))
    sec["scores"] = time.perf_counter() - t
    res = Circuit(lm.name, method, len(points), list(runs.clean.tokens), list(lm.encode(corrupt).tokens),
                  lm.label(runs.a), lm.label(runs.b), runs.m["clean"], runs.m["corrupt"], runs.graph, scores, n,
                  float("nan"))
    t = time.perf_counter()
    kept = faithfulness_of(runs, res.order(), sizes, tick)
    res.faithfulness = kept[sizes.index(n)]
    res.curve = list(zip(sizes, kept)) if curve else []
    sec["circuits"] = time.perf_counter() - t
    sec["total"] = time.perf_counter() - t0
    res.seconds = sec
    return res
