"""What attention heads contribute to one prediction: zero a head's output and compare the predictions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.hooks import zero_head

TOP_K = 5


@dataclass
class Prediction:
    position: int
    tokens: list[str]  # top-k labels
    probs: np.ndarray  # [K]
    target: str  # the token tracked
    target_id: int
    target_prob: float


def prediction(lm, logits: torch.Tensor, position: int, target_id: int | None = None) -> Prediction:
    """Top-k and the tracked token's probability from one position's logits [V] (target None: the arg-max)."""
    probs = torch.softmax(logits.float(), dim=-1)  # [V]
    p, i = probs.topk(min(TOP_K, probs.shape[-1]))
    tid = int(i[0]) if target_id is None else int(target_id)
    return Prediction(position, [lm.label(j) for j in i.tolist()], p.cpu().numpy(), lm.label(tid), tid, float(probs[tid]))


def _logits(lm, inputs, backend: str, interventions=None) -> torch.Tensor:
    out = lm.forward(inputs, backend=backend, interventions=interventions, records=False)
    if out.logits is None:
        raise ValueError(f"{lm.name} has no prediction head, so there is no prediction to change; "
                         "pick a model with a language-model head")
    return out.logits


@torch.no_grad()
def ablate_head(lm, inputs, site: str, head: int, position: int, target_id: int | None = None,
                backend: str = "eager") -> tuple[Prediction, Prediction]:
    """The prediction at `position` with every head, and with head `head` of `site` zeroed (its output z)."""
    before = prediction(lm, _logits(lm, inputs, backend)[0, position], position, target_id)
    after = _logits(lm, inputs, backend, {f"{site}.hook_z": zero_head(head)})[0, position]
    return before, prediction(lm, after, position, before.target_id)


def _zero_rows(rows: torch.Tensor, heads: torch.Tensor):
    def fn(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()
        x[rows, heads] = 0  # batch row b: head heads[b] of this site zeroed
        return x

    return fn


@torch.no_grad()
def ablation_deltas(lm, inputs, position: int, target_id: int, jobs: list[tuple[str, int]],
                    backend: str = "eager") -> np.ndarray:
    """p(target | head zeroed) − p(target | clean) at `position` for each (site, head) job: [len(jobs)].

    One batched forward: row 0 clean, row j + 1 with job j's head zeroed (its pattern, so its output z is 0).
    """
    b = len(jobs) + 1
    batched = inputs.expand(b)
    by_site: dict[str, list[tuple[int, int]]] = {}
    for j, (site, head) in enumerate(jobs):
        by_site.setdefault(site, []).append((j + 1, head))
    iv = {f"{site}.hook_pattern": _zero_rows(torch.tensor([r for r, _ in rh]), torch.tensor([h for _, h in rh]))
          for site, rh in by_site.items()}
    logits = _logits(lm, batched, backend, iv)[:, position].float()  # [B, V]
    p = torch.softmax(logits, -1)[:, target_id]  # [B]
    return (p[1:] - p[0]).double().cpu().numpy()


@torch.no_grad()
def head_sweep(lm, inputs, position: int, target_id: int | None = None,
               backend: str = "eager") -> tuple[list[str], np.ndarray, Prediction]:
    """Δp(target) when each head of each site is zeroed in turn: (sites, [sites, H], the clean prediction)."""
    base = lm.forward(inputs, backend=backend)
    if base.logits is None:
        raise ValueError(f"{lm.name} has no prediction head; pick a model with a language-model head")
    before = prediction(lm, base.logits[0, position], position, target_id)
    sites = base.capture.sites
    heads = base.capture[sites[0]].n_heads
    jobs = [(s, h) for s in sites for h in range(heads)]
    deltas = ablation_deltas(lm, inputs, position, before.target_id, jobs, backend)
    return sites, deltas.reshape(len(sites), heads), before  # [sites·H] -> [sites, H]
