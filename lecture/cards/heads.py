"""Which heads a bundled lecture model uses for each task, and the card's lines that name them.

`find_heads` measures, on held-out examples, how much attention each head puts from the row that
produces an answer onto the answer's known source token (and onto the previous token, which is what
an induction circuit's first head does), so the card can name the layer.head a lecturer should open.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import islice

import torch
from attnlab.lecture.evaluate import _pad, _vocab, kind_of
from attnlab.model.inputs import Inputs
from attnlab.model.lecture.corpus import model_stream, stream
from attnlab.model.lecture.roles import LOOK
from attnlab.model.lecture.tasks_retrieval import ONE_HOP
from attnlab.model.lecture.tasks_story import STORY_LEN
from attnlab.model.lecture.tasks_story import WORDS as STORY_WORDS

EVAL_SEED = 1


# -- which heads do the work --------------------------------------------------------------------------
@torch.no_grad()
def find_heads(lm, n: int = 100, seed: int = EVAL_SEED) -> dict[str, list[tuple[str, float]]]:
    """Per task (and "previous-token"): heads as ("layer.head" or "stack site layer.head", mean attention
    from the answer's query row to its source), strongest first."""
    vocab = _vocab(lm)
    pad = vocab["[PAD]"]
    tasks = sorted({ex.task for ex in islice(model_stream(kind_of(lm), seed, split="eval"), 200)})
    if lm.predicts_next_token and set(STORY_WORDS) <= set(vocab) and lm.cfg.max_len > STORY_LEN:
        tasks.append("story")  # evaluate() scores it too
    objective = lm.objective
    out: dict[str, list[tuple[str, float]]] = {}
    prev = defaultdict(list)
    for task in tasks:
        examples = list(islice(stream(task, seed, split="eval", objective=objective), n))
        if lm.reads_source:
            src = _pad([[vocab[t] for t in ex.src_tokens] for ex in examples], pad)
            tgt = _pad([[vocab[t] for t in ex.tgt_tokens[:-1]] for ex in examples], pad)
            cap = lm.forward(Inputs(tgt, [], src_ids=src, src_mask=src != pad)).capture
            sites = [s for s in cap.sites if cap[s].attn_type == "cross"]
        else:
            rows = [ex.masked_tokens if lm.fills_masks else ex.tokens for ex in examples]
            x = _pad([[vocab[t] for t in r] for r in rows], pad)
            cap = lm.forward(Inputs(x, [], attention_mask=x != pad)).capture
            sites = cap.sites
        shift = 0 if lm.fills_masks else 1  # a causal row predicts the next token
        scores, one_hop, bridge = {}, {}, {}
        for site in sites:
            pat = cap[site].pattern_full  # [B, H, q, k]
            for h in range(pat.shape[1]):
                vals = [(float(pat[i, h, p - shift, s]), ex.kind) for i, ex in enumerate(examples)
                        for p, s in zip(ex.answer_positions, ex.source_positions)]
                scores[_head_name(site, h)] = sum(v for v, _ in vals) / len(vals)
                if task == "retrieval":
                    ones = [v for v, k in vals if not k.startswith("friend_")]
                    one_hop[_head_name(site, h)] = sum(ones) / max(1, len(ones))
                if task == "story":  # two hops: the answer row on the bridge (the best friend's name)
                    bs = [float(pat[i, h, ex.answer_positions[0] - 1, ex.support_positions[0]])
                          for i, ex in enumerate(examples) if ex.support_positions]
                    bridge[_head_name(site, h)] = sum(bs) / max(1, len(bs))
                if lm.predicts_next_token and task == "induction":
                    pv = [float(pat[i, h, q, q - 1]) for i, ex in enumerate(examples) for q in range(2, len(ex.tokens))]
                    prev[_head_name(site, h)].append(sum(pv) / len(pv))
        out[task] = sorted(scores.items(), key=lambda kv: -kv[1])
        if one_hop:
            out["retrieval one-hop"] = sorted(one_hop.items(), key=lambda kv: -kv[1])
        if bridge:
            out["story bridge"] = sorted(bridge.items(), key=lambda kv: -kv[1])
    if prev:
        out["previous-token"] = sorted(((k, sum(v) / len(v)) for k, v in prev.items()), key=lambda kv: -kv[1])
    return out


def _head_name(site: str, head: int) -> str:
    """'2.1' for blocks.2.attn head 1; 'cross 1.3' / 'encoder 0.2' / 'decoder 2.0' for a site under a stack (an
    encoder–decoder's)."""
    parts = site.split(".")  # blocks.1.attn | decoder.blocks.1.cross_attn
    name = f"{parts[-2]}.{head}"
    if len(parts) > 3:
        return f"cross {name}" if parts[-1] == "cross_attn" else f"{parts[0]} {name}"
    return name


def _show(name: str) -> str:
    """A head's name for the card (as _head_name writes it), with the hook site the app shows."""
    *stack, lh = name.split(" ")
    layer, head = lh.split(".")
    if stack:
        site = f"decoder.blocks.{layer}.cross_attn" if stack == ["cross"] else f"{stack[0]}.blocks.{layer}.attn"
    else:
        site = f"blocks.{layer}.attn"
    return f"**{name}** (layer {layer}, head {head}: `{site}`)"


def _accuracy(tasks: dict, task: str) -> float:
    """Held-out accuracy behind a head line: one-hop retrieval over its own question kinds (detail metrics)."""
    if task == "retrieval one-hop" and "kinds" in tasks.get("retrieval", {}):
        kinds = [k for name, k in tasks["retrieval"]["kinds"].items() if name in ONE_HOP]
        return sum(k["accuracy"] * k["n"] for k in kinds) / max(1, sum(k["n"] for k in kinds))
    if task == "story bridge":  # the two-hop question the bridge serves
        return tasks.get("story", {}).get("kinds", {}).get("best", {}).get("accuracy", 0.0)
    return tasks.get({"previous-token": "induction", "retrieval one-hop": "retrieval"}.get(task, task), {}).get(
        "accuracy", 1.0)


def look_at(objective: str, heads: dict, metrics: dict | None = None, min_accuracy: float = 0.8,
            min_attention: float = 0.25) -> list[str]:
    """One line per task the model solves (accuracy ≥ min_accuracy) whose best head is clear; `objective`: the
    model's (lm.objective), which picks the lines (model/lecture/roles.LOOK)."""
    lines = []
    tasks = (metrics or {}).get("tasks", {})
    for task, ranked in heads.items():
        template = LOOK.get((objective, task))
        acc = _accuracy(tasks, task)
        if acc < min_accuracy:
            lines.append(f"{task}: this checkpoint does not solve the task yet ({acc:.0%}), so no head is named.")
            continue
        if template and ranked and ranked[0][1] >= min_attention:
            line = template.format(h=_show(ranked[0][0]), v=ranked[0][1])
            if len(ranked) > 1:
                line += f" Runner-up: {ranked[1][0]} ({ranked[1][1]:.0%})."
            lines.append(line)
    return lines


# -- the card -----------------------------------------------------------------------------------------
