"""Mixture-of-experts routing: per token and layer the chosen experts and their weights, expert load against
the uniform share, router entropy, forcing a token to another expert, and which experts specialise in what.

Everything reads the RouterRecords of a captured run (model/router_record.py); `force_expert_run` reruns
the model with `hook_expert_choice` replaced (model/moe.py `force_expert`)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import numpy as np
import torch
from attnlab.model.captured import CapturedRun
from attnlab.model.inputs import InputError, Inputs
from attnlab.model.lecture import tasks_language, tasks_retrieval
from attnlab.model.lecture.corpus import model_stream
from attnlab.model.moe import force_expert


def is_moe(lm) -> bool:
    """True when the model routes tokens to experts (mlp='moe')."""
    return lm.cfg.mlp == "moe"


def require_moe(lm) -> None:
    if not is_moe(lm):
        raise InputError(f"{lm.name} has no mixture-of-experts layers (its MLP is {lm.cfg.mlp!r}); "
                         "pick a model with experts, e.g. lecture-moe")


@dataclass
class Routing:
    """One run's routing, layer by layer (arrays are numpy; L layers, T tokens, E experts, k slots)."""

    tokens: list[str]
    sites: list[str]  # "blocks.{i}.mlp"
    gates: np.ndarray  # float32 [L, T, E]: the weight each token gives each expert (0 if not chosen)
    probs: np.ndarray  # float32 [L, T, E]: the router softmax
    choice: np.ndarray  # int [L, T, k]: chosen experts, best first
    weights: np.ndarray  # float32 [L, T, k]
    entropy: np.ndarray  # float32 [L, T] bits
    load: np.ndarray  # float32 [L, E]: share of token slots per expert (sums to 1 per layer)
    top_k: int

    @property
    def n_experts(self) -> int:
        return self.gates.shape[-1]

    @property
    def uniform(self) -> float:
        """The load every expert would get under perfectly balanced routing."""
        return 1.0 / self.n_experts


def routing(run: CapturedRun) -> Routing:
    """The routing of a captured run (its decoder stack's routers, in layer order)."""
    if not run.routers:
        raise InputError(f"{run.model} has no mixture-of-experts layers: nothing was routed")
    recs = sorted(run.routers.values(), key=lambda r: r.layer)
    return Routing(
        tokens=list(run.tokens), sites=[r.site for r in recs],
        gates=np.stack([r.gates() for r in recs]), probs=np.stack([r.probs() for r in recs]),
        choice=np.stack([r.choice[0] for r in recs]), weights=np.stack([r.weights[0] for r in recs]),
        entropy=np.stack([r.entropy() for r in recs]), load=np.stack([r.load() for r in recs]),
        top_k=recs[0].top_k)


def route_text(lm, inputs: Inputs, backend: str = "eager") -> tuple[Routing, CapturedRun]:
    """Run `inputs` once; its routing and the run (for the predictions)."""
    require_moe(lm)
    run = lm.run(inputs=inputs, backend=backend)
    return routing(run), run


def force_expert_run(lm, inputs: Inputs, layer: int, position: int, expert: int, backend: str = "eager") -> dict:
    """Send token `position` at `layer` to `expert` (first slot; the router's other picks fill the rest), and
    compare routing and next-token predictions with the unforced run. Returns {"before", "after": Routing,
    "top_before", "top_after": [(token, prob)] at `position` (the run's top 5), "changed": [(layer, token)]
    whose set of experts moved}."""
    require_moe(lm)
    n_layers, T = lm.cfg.n_layers, inputs.ids.shape[1]
    if not 0 <= layer < n_layers or not 0 <= position < T or not 0 <= expert < lm.cfg.n_experts:
        raise InputError(f"layer {layer}, token {position}, expert {expert} out of range "
                         f"(layers 0..{n_layers - 1}, tokens 0..{T - 1}, experts 0..{lm.cfg.n_experts - 1})")
    site = f"blocks.{layer}.mlp.hook_expert_choice"
    base = lm.run(inputs=inputs, backend=backend)
    forced = lm.run(inputs=inputs, backend=backend, interventions={site: force_expert(position, expert)})
    before, after = routing(base), routing(forced)
    moved = np.any(np.sort(before.choice, -1) != np.sort(after.choice, -1), axis=-1)  # [L, T]
    return {"before": before, "after": after, "top_before": _top(base, position), "top_after": _top(forced, position),
            "changed": [(int(a), int(b)) for a, b in zip(*np.nonzero(moved))]}


def _top(run: CapturedRun, position: int) -> list[tuple[str, float]]:
    return [(t, float(p)) for t, p in zip(run.top_tokens[position], run.top_probs[position])]


# -- which experts specialise in what ---------------------------------------------------------------------------
def specialisation(lm, texts: list[list[str]], classes: dict[str, set[str]], batch: int = 64) -> dict:
    """Per layer, expert and token class: the share of that class's tokens whose first choice (the expert of
    highest weight) is the expert (uniform share: 1 / n_experts). `texts` are token lists (the tokenizer's words, [BOS] first); a token
    counts in every class that holds it. Returns {"classes", "uniform", "counts" {class: tokens},
    "share" float [L, E, C], "overall" float [L, E] (every token)}."""
    require_moe(lm)
    vocab = lm.tokenizer.tok.get_vocab(with_added_tokens=True)
    names = list(classes)
    L, E = lm.cfg.n_layers, lm.cfg.n_experts
    slots = np.zeros((L, E, len(names) + 1))  # first choices per expert and class; the last column: every token
    counts = np.zeros(len(names) + 1, dtype=int)
    for i in range(0, len(texts), batch):
        rows = texts[i:i + batch]
        T = max(len(r) for r in rows)
        ids = torch.tensor([[vocab[t] for t in r] + [0] * (T - len(r)) for r in rows])  # [B, T] right-padded
        real = torch.tensor([[True] * len(r) + [False] * (T - len(r)) for r in rows])  # [B, T]: no key on padding
        cap = lm.forward(Inputs(ids, [], attention_mask=real), records=True).capture
        member = np.zeros((len(rows), T, len(names) + 1), dtype=bool)
        for b, r in enumerate(rows):
            for t, tok in enumerate(r):
                member[b, t, -1] = True
                for c, n in enumerate(names):
                    member[b, t, c] = tok in classes[n]
        counts += member.sum((0, 1))
        for recs in cap.routers.values():
            first = np.eye(E)[recs[0].choice[..., 0]]  # [B, T, E] one-hot first choice
            slots[recs[0].layer] += np.einsum("bte,btc->ec", first, member)
    share = slots / np.maximum(slots.sum(1, keepdims=True), 1)  # [L, E, C+1]
    return {"classes": names, "uniform": 1.0 / E, "counts": dict(zip(names + ["all"], counts.tolist())),
            "share": share[..., :-1].astype(np.float32), "overall": share[..., -1].astype(np.float32)}


def lecture_classes() -> dict[str, set[str]]:
    """Token classes of the lecture corpus: number words (ages), names, pets, punctuation, question words,
    the invented language's words and [BOS]."""
    ret = tasks_retrieval
    return {"number words": set(ret.AGES), "names": set(ret.NAMES), "pets": set(ret.PETS), "punctuation": {".", "?"},
            "question words": {"how", "what", "who"}, "invented words": set(tasks_language.LEXICON.values()) - {"."},
            "[BOS]": {"[BOS]"}}


def lecture_specialisation(lm, n: int = 600, seed: int = 1) -> dict:
    """`specialisation` on n held-out examples of the decoder corpus (model/lecture/corpus.py)."""
    texts = [list(ex.tokens) for ex in islice(model_stream("decoder", seed, split="eval"), n)]
    return specialisation(lm, texts, lecture_classes())


def specialists(table: dict, min_ratio: float = 1.5) -> list[dict]:
    """Rows (layer, expert, class, share, ratio to uniform) where an expert gets ≥ min_ratio × the uniform
    share of a class, strongest first."""
    out = []
    share, u = table["share"], table["uniform"]
    for layer, e, c in zip(*np.nonzero(share >= min_ratio * u)):
        out.append({"layer": int(layer), "expert": int(e), "class": table["classes"][c],
                    "share": float(share[layer, e, c]), "ratio": float(share[layer, e, c] / u)})
    return sorted(out, key=lambda r: -r["ratio"])
