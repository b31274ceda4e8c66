"""The model card (README.md) beside a bundled lecture model's weights: its recipe, held-out accuracy,
learning curve and the heads worth showing (lecture/cards/heads.py).

    python -m attnlab.lecture.cards.lecture --model lecture-decoder [--n 1000]   # re-evaluate, find heads, rewrite
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from attnlab.lecture.cards.heads import EVAL_SEED, find_heads, look_at
from attnlab.lecture.curve import draw, jump, tasks_of
from attnlab.lecture.evaluate import evaluate
from attnlab.model.registry import BUNDLED_DIR, load_attnlab_folder

# keyed by the model's training objective (ModelConfig.objective, lm.objective)
KIND = {"causal": "causal language model (decoder)", "masked": "masked language model (encoder)",
        "seq2seq": "encoder–decoder (toy translation)"}
OBJECTIVE = {
    "causal": "next-token prediction; answer tokens weigh 1 and every other token 0.01 (most story and "
               "random-sequence tokens cannot be predicted, and their loss would drown the answers' signal)",
    "masked": "masked-LM: every answer position is [MASK]ed (weight 1), plus 10% of the other tokens "
               "(weight 0.1; never a source or bridge token, never a bracket)",
    "seq2seq": "teacher forcing: the decoder reads the target shifted right and predicts it, [EOS] included",
}
METRIC = {
    "causal": "argmax at the position before each answer token equals the answer (induction: per token)",
    "masked": "argmax at each [MASK]ed answer position equals the hidden token",
    "seq2seq": "greedy decoding from [BOS] reproduces the whole target sentence and its [EOS] (exact match)",
}
EVAL_N = 1000
CURVE_PNG = "learning-curve.png"


def _table(metrics: dict) -> list[str]:
    lines = ["| task | kind | examples | accuracy | all answers right |", "| --- | --- | ---: | ---: | ---: |"]
    for task, m in metrics["tasks"].items():
        lines.append(f"| **{task}** | all | {m['n']} | **{m['accuracy']:.1%}** | {m.get('exact', m['accuracy']):.1%} |")
        for kind, k in m.get("kinds", {}).items():
            lines.append(f"| | {kind} | {k['n']} | {k['accuracy']:.1%} | {k.get('exact', k['accuracy']):.1%} |")
    return lines


def _signal_lines(t: dict) -> list[str]:
    """What the training did beyond the plain objective (more answers per sequence, the attention hint)."""
    out = []
    if (t.get("questions") or 1) > 1 or (t.get("mask_share") or 0) > 0:
        parts = []
        if (t.get("questions") or 1) > 1:
            parts.append(f"up to {t['questions']} questions per retrieval story (the held-out format is the "
                         "first one: a causal model's first answer sees exactly it)")
        if (t.get("mask_share") or 0) > 0:
            parts.append(f"{t['mask_share']:.0%} of induction words and closers hidden, not one")
        out.append("- More answers per training sequence: " + "; ".join(parts) + ".")
    if t.get("init"):
        out.append(f"- Started from the weights in `{t['init']}` (the previous checkpoint; its recipe is in "
                   "`training.stages` of config.json), not from random weights.")
    if t.get("one_hop"):
        out.append(f"- Curriculum: retrieval asked one-hop questions only until step {t['one_hop']}, then the "
                   "full mix of one- and two-hop questions.")
    if t.get("attn_only"):
        out.append(f"- Attention first: the MLPs started with a zero output and stayed frozen for the first "
                   f"{t['attn_only']} steps, then trained with the rest.")
    if (t.get("hint") or 0) > 0 and (t.get("hint_steps") or 0) > 0:
        tasks = t.get("hint_tasks") or ("retrieval",)
        meaning = [f"`{k}`: {HINTS[k]}" for k in tasks if k in HINTS]
        if not any(k.endswith("-bridge") for k in tasks):
            meaning.append("two-hop bridges never hinted")
        out.append(f"- Attention hint ({', '.join(tasks)}): for the first {t['hint_steps']} steps the loss also asked "
                   "one head per task — the model's pick, whichever was closest over the batch — to put weight on "
                   f"each answer's source token (weight {t['hint']} falling linearly to 0; " + "; ".join(meaning)
                   + "); after that the plain loss alone. The heads named below are measured on held-out text, "
                   "not assigned.")
    return out


# What each hint task asks beyond "answer row → source" (the -owner, -asker, -prev and -bridge halves: lower layers).
HINTS = {
    "retrieval-2hop": "two-hop answers hinted as a task of their own",
    "retrieval-bridge": "from each two-hop answer's row to the best friend's name, in the lower layers",
    "story-bridge": "the same in the lecture's stories",
    "retrieval-owner": "from each fact's value token to the name the fact is about",
    "retrieval-asker": "from each answer's row to the name its question asks about",
    "story-owner": "from each best friend's name to the person whose best friend they are (`mary` → `alex` in "
                   "`alex has a best friend named mary`)",
    "story-asker": "from each `… best friend of X ?` answer's row to X",
    "induction-prev": "from each copied token to the token before it",
}


def _seed_flag(t: dict) -> str:
    """The reproduce command's seed flag, when the run did not use the recipe's seed 0."""
    return f" --seed {t['seed']}" if t.get("seed") else ""


def _where(t: dict) -> str:
    """Where a run trained: its GPU, or this project's CPU."""
    if t.get("device") == "cuda":
        return f"on one {t.get('gpu') or 'CUDA GPU'} (`--device cuda`), beside other training runs"
    return (f"on this project's 2-core CPU with {t.get('threads', 1)} torch thread, while other jobs shared the "
            "machine")


def _curve_lines(folder: Path, curve: list[dict] | None) -> list[str]:
    """The learning-curve section: the picture (drawn next to the card) and each task's jump."""
    if not curve:
        return []
    draw(curve, Path(folder) / CURVE_PNG)
    lines = ["## Learning curve", "", f"![held-out accuracy per task vs training step]({CURVE_PNG})", "",
             "Held-out accuracy at each evaluation of the run (the numbers: `curve.json`). Largest rise between two "
             "evaluations, per task:", ""]
    for task in tasks_of(curve):
        j = jump(curve, task)
        if j:
            lines.append(f"- {task}: {j['before']:.0%} at step {j['from_step']} → {j['after']:.0%} at step "
                         f"{j['to_step']}")
    return lines + [""]


def write_card(folder: Path, name: str, cfg, training: dict, metrics: dict, *, eval_n: int, eval_seed: int = EVAL_SEED,
               look: list[str] | None = None, note: str = "", curve: list[dict] | None = None) -> Path:
    objective = cfg.objective
    layers = f"{cfg.n_layers} encoder + {cfg.dec_layers} decoder layers" if objective == "seq2seq" else \
        f"{cfg.n_layers} layers"
    t = training
    lines = [
        f"# {name}",
        "",
        f"A small {KIND[objective]} trained in this repository on the generated lecture corpus "
        "(`model/lecture/corpus.py`), where every answer's source token is known. Made for teaching: "
        "every head fits on one screen.",
        "",
        "## Model",
        "",
        f"- {layers} × {cfg.n_heads} heads, d_model {cfg.d_model} (d_head {cfg.d_head}), MLP {cfg.hidden} ({cfg.mlp}), "
        f"{cfg.norm}-LN, {cfg.positional} positions, context {cfg.max_len} tokens, vocabulary {cfg.vocab_size} "
        "(word level, `tokenizer.json`; [BOS] is prepended, never [EOS]).",
        f"- Objective: {OBJECTIVE[objective]}.",
        f"- Training: `attnlab train --model {name}{_seed_flag(t)}` — {t.get('steps')} steps × batch {t.get('batch')}, AdamW "
        f"(peak lr {t.get('lr')}, linear warm-up, cosine to 10%), seed {t.get('seed')}; "
        f"{t.get('seconds', 0) / 60:.1f} min wall time " + _where(t) + ".",
        *[f"  - stage {i}: `{st['command']}` — {st['steps']} steps, {float(st['seconds']) / 60:.1f} min"
          for i, st in enumerate(t.get("stages") or [], 1)],
        *_signal_lines(t),
        "",
        "## Held-out accuracy",
        "",
        f"`attnlab eval --model {name} --n {eval_n} --seed {eval_seed} --detail` — fresh examples from the "
        f"corpus's eval split (never seen in training). Metric: {METRIC[objective]}.",
        "",
        *_table(metrics),
        "",
    ]
    lines += _curve_lines(folder, curve)
    if look:
        lines += ["## What to look at in the app", "", *[f"- {s}" for s in look], ""]
    if note:
        lines += ["## Notes", "", note, ""]
    path = Path(folder) / "README.md"
    path.write_text("\n".join(lines))
    return path


def finalize(folder: Path, name: str, eval_n: int = EVAL_N, note: str = "") -> dict:
    """Evaluate a saved model on eval_n held-out examples, find its heads, write README.md."""
    folder = Path(folder)
    lm = load_attnlab_folder(folder, name, str(folder))
    meta = json.loads((folder / "config.json").read_text())
    metrics = evaluate(lm, eval_n, EVAL_SEED, detail=True)
    heads = find_heads(lm)
    curve = json.loads((folder / "curve.json").read_text()) if (folder / "curve.json").is_file() else None
    write_card(folder, name, lm.cfg, meta.get("training", {}), metrics, eval_n=eval_n,
               look=look_at(lm.objective, heads, metrics), note=note, curve=curve)
    return {"metrics": metrics, "heads": {k: v[:4] for k, v in heads.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab.lecture.cards.lecture", description="rewrite a lecture model's card")
    p.add_argument("--model", required=True)
    p.add_argument("--folder", default=None)
    p.add_argument("--n", type=int, default=EVAL_N)
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    report = finalize(Path(args.folder) if args.folder else BUNDLED_DIR / args.model, args.model, args.n, args.note)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
