"""The model card (README.md) written beside a bundled lecture model's weights."""

from __future__ import annotations

from pathlib import Path

KIND = {"decoder": "causal language model (decoder)", "encoder": "masked language model (encoder)",
        "encdec": "encoder–decoder (toy translation)"}
OBJECTIVE = {
    "decoder": "next-token prediction on every token of the decoder mixture (answer tokens weighted ×4)",
    "encoder": "masked-LM: every answer position is [MASK]ed, plus 10% of the other tokens (never a "
               "source or bridge token, never a bracket)",
    "encdec": "teacher forcing: the decoder reads the target shifted right and predicts it, [EOS] included",
}
METRIC = {
    "decoder": "argmax at the position before each answer token equals the answer (induction: per token)",
    "encoder": "argmax at each [MASK]ed answer position equals the hidden token",
    "encdec": "greedy decoding from [BOS] reproduces the whole target sentence and its [EOS] (exact match)",
}


def _table(metrics: dict) -> list[str]:
    lines = ["| task | kind | examples | accuracy | all answers right |", "| --- | --- | ---: | ---: | ---: |"]
    for task, m in metrics["tasks"].items():
        lines.append(f"| {task} | all | {m['n']} | {m['accuracy']:.1%} | {m.get('exact', m['accuracy']):.1%} |")
        for kind, k in m.get("kinds", {}).items():
            lines.append(f"| | {kind} | {k['n']} | {k['accuracy']:.1%} | {k.get('exact', k['accuracy']):.1%} |")
    return lines


def write_card(folder: Path, name: str, recipe, metrics: dict, seconds: float, steps: int,
               look_at: list[str] | None = None, eval_n: int | None = None, eval_seed: int = 1,
               note: str = "") -> Path:
    cfg = recipe.cfg
    kind = recipe.corpus
    n = eval_n or sum(m["n"] for m in metrics["tasks"].values())
    layers = f"{cfg.n_layers} encoder + {cfg.dec_layers} decoder layers" if kind == "encdec" else f"{cfg.n_layers} layers"
    lines = [
        f"# {name}",
        "",
        f"A small {KIND[kind]} trained in this repository on the generated lecture corpus "
        "(`model/lecture/corpus.py`), where every answer's source token is known. Made for teaching: "
        "every head fits on one screen.",
        "",
        "## Model",
        "",
        f"- {layers} × {cfg.n_heads} heads, d_model {cfg.d_model} (d_head {cfg.d_head}), MLP {cfg.hidden} ({cfg.mlp}), "
        f"{cfg.norm}-LN, {cfg.positional} positions, context {cfg.max_len} tokens, vocabulary {cfg.vocab_size} "
        "(word level, `tokenizer.json`; [BOS] is prepended, never [EOS]).",
        f"- Objective: {OBJECTIVE[kind]}.",
        f"- Training: `attnlab train --model {name}` — {steps} steps × batch {recipe.batch}, AdamW "
        f"(peak lr {recipe.lr:g}, {recipe.warmup} warm-up steps, cosine to 10%), seed {recipe.seed}, "
        f"{seconds / 60:.1f} min wall time on a 2-core CPU shared with other jobs (1 torch thread).",
        "",
        "## Held-out accuracy",
        "",
        f"`attnlab eval --model {name} --n {n} --seed {eval_seed}` — fresh examples from the eval split "
        f"(never seen in training). Metric: {METRIC[kind]}.",
        "",
        *_table(metrics),
        "",
    ]
    if look_at:
        lines += ["## What to look at in the app", "", *[f"- {s}" for s in look_at], ""]
    if note:
        lines += ["## Notes", "", note, ""]
    path = Path(folder) / "README.md"
    path.write_text("\n".join(lines))
    return path
