"""The query–key view (AttentionViz): one head's queries and keys over a batch of inputs, projected together to 2-D.

The vectors are the record's q and k — after positions, RoPE and QK-norm, exactly what was dotted — for any
model, text or image. `align` applies AttentionViz's two softmax-preserving moves: all keys shifted by one
vector so their mean sits on the queries' mean (a query's scores all change by the same q·c), then queries
scaled by a and keys by 1/a so both have the same mean norm (every q·k unchanged). PCA is the SVD of the
centred stacked matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from attnlab.model.captured import CapturedRun


@dataclass
class QKPoints:
    """One head's queries then keys over a batch: 2-D coordinates and where each point came from."""

    xy: np.ndarray  # float64 [N, 2] (PCA coordinates)
    kind: np.ndarray  # str [N]: "query" | "key"
    source: np.ndarray  # int [N]: index of the input in the batch
    position: np.ndarray  # int [N]: token (patch) position in its input
    labels: list[str]  # [N] token (patch) labels
    explained: np.ndarray  # float64 [2]: share of the variance on each axis
    names: list[str]  # the batch's input names

    def of(self, kind: str) -> np.ndarray:
        """Bool [N]: the points of one kind."""
        return self.kind == kind


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates [N, 2], explained variance ratio [2]) of the rows of x [N, D]; axes missing in the data
    (N < 3 or D < 2) are zeros with ratio 0. Signs are fixed so each axis' largest |loading| is positive."""
    x = np.asarray(x, dtype=np.float64)
    c = x - x.mean(0, keepdims=True)  # [N, D]
    u, s, vt = np.linalg.svd(c, full_matrices=False)  # u [N, r], s [r], vt [r, D]
    k = min(2, len(s))
    sign = np.sign(vt[np.arange(k), np.abs(vt[:k]).argmax(1)])  # [k]
    sign[sign == 0] = 1.0
    xy = np.zeros((len(x), 2))
    xy[:, :k] = u[:, :k] * (s[:k] * sign)  # [N, k]
    total = float((s ** 2).sum())
    ratio = np.zeros(2)
    if total > 0:
        ratio[:k] = s[:k] ** 2 / total
    return xy, ratio


def align(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AttentionViz's normalisation of q [Nq, d] and k [Nk, d]: keys translated onto the queries' mean, then
    q·a and k/a with a = sqrt(mean|k| / mean|q|). Every softmax row is unchanged."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    k = k + (q.mean(0) - k.mean(0))
    nq, nk = np.linalg.norm(q, axis=1).mean(), np.linalg.norm(k, axis=1).mean()
    a = np.sqrt(nk / nq) if nq > 0 and nk > 0 else 1.0
    return q * a, k / a


def site_tokens(run: CapturedRun, site: str) -> tuple[list[str], list[str]]:
    """(query labels, key labels) of one attention site of a run."""
    group = next(g for g, sites in run.groups().items() if site in sites)
    return run.group_tokens(group)


def head_vectors(run: CapturedRun, site: str, head: int) -> tuple[np.ndarray, np.ndarray]:
    """(q [q, d], k [k, d]) of one query head at one site: the vectors its scores are scale·q·kᵀ (+ bias) of
    (under grouped-query attention, the k/v head it shares)."""
    rec = run.records[site]
    k = rec.keys(head)[0]  # [k, d]; raises IndexError for a head out of range
    return rec.q[0, head], k  # [q, d], [k, d]


def qk_points(runs: list[CapturedRun], site: str, head: int, names: list[str] | None = None,
              normalise: bool = True) -> QKPoints:
    """Every query and every key of `head` at `site` over the batch `runs`, projected together to 2-D."""
    if not runs:
        raise ValueError("the query–key view needs at least one input")
    names = list(names) if names is not None else [f"input {i}" for i in range(len(runs))]
    qs, ks, q_meta, k_meta = [], [], [], []
    for i, run in enumerate(runs):
        if site not in run.records:
            raise KeyError(f"{names[i]} has no attention site {site}")
        q, k = head_vectors(run, site, head)
        q_lab, k_lab = site_tokens(run, site)
        qs.append(q)
        ks.append(k)
        q_meta += [(i, p, str(t)) for p, t in enumerate(q_lab[: len(q)])]
        k_meta += [(i, p, str(t)) for p, t in enumerate(k_lab[: len(k)])]
    q, k = np.concatenate(qs), np.concatenate(ks)  # [Nq, d], [Nk, d]
    if normalise:
        q, k = align(q, k)
    xy, ratio = pca_2d(np.concatenate([q, k]))  # [Nq + Nk, 2]
    meta = q_meta + k_meta
    kind = np.array(["query"] * len(q) + ["key"] * len(k))
    return QKPoints(xy, kind, np.array([m[0] for m in meta], dtype=int), np.array([m[1] for m in meta], dtype=int),
                    [m[2] for m in meta], ratio, names)


def qk_table(points: QKPoints) -> list[dict]:
    """The points as rows (kind, input, position, label, pc1, pc2) for a CSV export."""
    return [{"kind": str(points.kind[i]), "input": points.names[points.source[i]], "position": int(points.position[i]),
             "label": points.labels[i], "pc1": float(points.xy[i, 0]), "pc2": float(points.xy[i, 1])}
            for i in range(len(points.labels))]
