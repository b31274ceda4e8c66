"""The card (README.md) of the bundled mixture-of-experts decoder: lecture.cards.lecture's evaluation and model
sections, then the experts — measured on held-out lecture text: which token classes each expert takes as its
first choice, against the uniform share.

    python -m attnlab.lecture.cards.moe [--model lecture-moe] [--n 1000] [--spec-n 600]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from attnlab.analysis.probes.routing import lecture_specialisation, specialists
from attnlab.lecture.cards.lecture import EVAL_N, EVAL_SEED, write_card
from attnlab.lecture.evaluate import evaluate
from attnlab.model.registry import BUNDLED_DIR, load_attnlab_folder

SPEC_N = 600
STRONG = 2.0  # an expert "specialises" in a class when it takes ≥ STRONG × the uniform share of it


def specialisation_lines(table: dict, n: int) -> list[str]:
    """The experts section: one table row per layer and expert (shares of each class, bold when ≥ STRONG ×
    uniform), then the strongest specialists in words."""
    classes, u = table["classes"], table["uniform"]
    share, overall = table["share"], table["overall"]
    L, E = overall.shape
    head = "| layer | expert | all tokens | " + " | ".join(classes) + " |"
    lines = [head, "| ---: | --- | ---: | " + " | ".join("---:" for _ in classes) + " |"]
    for layer in range(L):
        for e in range(E):
            cells = [f"**{v:.0%}**" if v >= STRONG * u else f"{v:.0%}" for v in share[layer, e]]
            lines.append(f"| {layer} | E{e} | {overall[layer, e]:.0%} | " + " | ".join(cells) + " |")
    counts = ", ".join(f"{c} {table['counts'][c]:,}" for c in classes)
    best = []  # per class: the layer and expert taking the largest share of it
    for c, name in enumerate(classes):
        if name == "[BOS]":  # one token, always first: trivially routed one way
            continue
        layer, e = np.unravel_index(np.argmax(share[:, :, c]), share.shape[:2])
        v = float(share[layer, e, c])
        best.append(f"{name} — layer {layer} E{e} ({v:.0%}, {v / u:.1f}× uniform)")
    return [f"Measured with `analysis.probes.routing.lecture_specialisation` on {n} held-out examples of the decoder "
            f"corpus (seed {EVAL_SEED}; tokens per class: {counts}; {table['counts']['all']:,} tokens in all). "
            f"Each cell: the share of the class whose **first choice** (the expert of highest router weight) is "
            f"that expert; a class's column sums to 100% per layer; uniform routing would give {u:.0%}. "
            f"Bold: ≥ {STRONG:g}× uniform.", "", *lines, "",
            "The expert taking most of each class: " + "; ".join(best) + "."]


def write_moe_card(folder: Path, name: str, n: int = EVAL_N, spec_n: int = SPEC_N) -> dict:
    folder = Path(folder)
    lm = load_attnlab_folder(folder, name, str(folder))
    cfg = lm.cfg
    meta = json.loads((folder / "config.json").read_text())
    training = meta.get("training", {})
    metrics = evaluate(lm, n, EVAL_SEED, detail=True)
    table = lecture_specialisation(lm, spec_n, EVAL_SEED)
    size = (folder / "model.safetensors").stat().st_size
    n_params = sum(p.numel() for p in lm.model.parameters())
    active = n_params - cfg.n_layers * (cfg.n_experts - cfg.top_k) * sum(
        p.numel() for p in lm.model.blocks[0].mlp.experts[0].parameters())
    note = "\n".join([
        "### Mixture of experts",
        "",
        f"Every block's MLP is a mixture of {cfg.n_experts} {cfg.expert_mlp.upper()} experts (hidden size "
        f"{cfg.hidden} each) behind a bias-free linear router: softmax over the {cfg.n_experts} logits, the top "
        f"{cfg.top_k} kept and renormalised to sum to 1 (as in Mixtral). {n_params:,} parameters, {active:,} "
        f"used per token; `model.safetensors` is {size / 1e6:.1f} MB. Training adds the Switch/Mixtral "
        f"load-balancing loss n_experts · Σ f_e · P_e (weight {cfg.router_aux_coef}, mean over layers).",
        "",
        "Initialisation (sparse upcycling): the recipe starts from `lecture-decoder` — its embeddings, attention "
        "and norms copied; expert e of a block takes hidden units [128·e, 128·(e+1)) of that block's 512-unit "
        "dense MLP (down projection × 4, the dense down bias), so the four experts together are the dense MLP; "
        "the routers start random. Reproduce: `attnlab train --model lecture-moe` (needs the bundled "
        "lecture-decoder), then `python -m attnlab.lecture.cards.moe` for this card."
        + (f" Shipped: the step-{training['steps']} save of the {training['of_steps']}-step recipe (training saves "
           f"every 500 steps; that save came {training.get('seconds', 0) / 60:.1f} min in, and the run was stopped "
           "there to stay within the 25-minute CPU budget)." if training.get("of_steps", 0) > training.get("steps", 0) else ""),
        "",
        "### Which experts take which tokens",
        "",
        *specialisation_lines(table, spec_n),
        "",
        "In the app: the **Routing** page (`/routing`) shows the router per token and layer, expert load against "
        "the uniform share, the router's entropy, and forces a token to another expert to show how the "
        "prediction changes.",
    ])
    write_card(folder, name, cfg, training, metrics, eval_n=n, note=note)
    return {"metrics": {t: m["accuracy"] for t, m in metrics["tasks"].items()}, "size_mb": size / 1e6,
            "params": n_params, "active": active, "specialists": specialists(table, STRONG)[:12],
            "classes": table["classes"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab.lecture.cards.moe", description="rewrite lecture-moe's card")
    p.add_argument("--model", default="lecture-moe")
    p.add_argument("--folder", default=None)
    p.add_argument("--n", type=int, default=EVAL_N)
    p.add_argument("--spec-n", type=int, default=SPEC_N)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    report = write_moe_card(Path(args.folder) if args.folder else BUNDLED_DIR / args.model, args.model, args.n,
                            args.spec_n)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
