"""The model card (README.md) of lecture-vit: recipe, cost, held-out accuracy and what to look at. Numbers come
in measured (held-out accuracy from evaluate_vit, attention/rollout shares from the image faithfulness report);
this module only writes them down."""

from __future__ import annotations

from pathlib import Path

from model.config import ModelConfig

from .shapes import CLASSES, DISTRACTORS, EVAL_BUCKETS, IMAGE_SIZE, SIZES

METHOD_NAMES = {"last_layer": "last-layer [CLS] attention (mean over heads)",
                "head_mean": "[CLS] attention, mean over all layers and heads",
                "rollout": "attention rollout (mean fusion, no discard)",
                "grad_rollout": "gradient-weighted rollout (correct class)",
                "relevance": "gradient relevance, Chefer et al. 2021 (correct class)"}


def render_card(cfg: ModelConfig, training: dict, evaluation: dict, faith: dict, cmd_eval: str) -> str:
    """README.md text from the training record, `attnlab eval`'s report and `attnlab faithfulness`'s report."""
    t, c = training, faith["chance"]
    per = " | ".join(f"{k} {v['accuracy']:.1%} (n={v['n']})" for k, v in evaluation["per_class"].items())
    methods = "\n".join(f"| {METHOD_NAMES[m]} | {v['pointing']:.1%} | {v['mass']:.1%} |" for m, v in faith["methods"].items())
    top = faith["heads"][:3]
    heads = ", ".join(f"**{h['layer']}.{h['head']}** (`blocks.{h['layer']}.attn`, head {h['head']}: {h['mass']:.0%})"
                      for h in top)
    m = faith["methods"]
    last = m["last_layer"]["mass"]
    keep = min(v["mass"] for k, v in m.items() if k != "last_layer")
    keep_max = max(v["mass"] for k, v in m.items() if k != "last_layer")
    layers = sorted({str(h["layer"]) for h in top})
    return f"""# lecture-vit

A small vision transformer trained in this repository on generated images whose answer region is known
(`model/lecture/shapes.py`): a {IMAGE_SIZE}×{IMAGE_SIZE} dark canvas with 2–5 shapes ({', '.join(CLASSES)};
boxes of {SIZES[0]}–{SIZES[1] - 1} pixels, never touching), exactly one of them red, the others
{', '.join(DISTRACTORS)}. The label is **the shape of the red object**; every image carries the pixel mask of that
object, so every attention map can be checked against the truth. Made for teaching: 4 heads × {cfg.n_layers} layers
over an {cfg.grid}×{cfg.grid} patch grid.

## Model

- ViT: patch {cfg.patch_size}×{cfg.patch_size} (a strided convolution) → {cfg.n_patches} patch tokens + [CLS],
  {cfg.positional} position embeddings, {cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model},
  MLP {cfg.hidden} ({cfg.mlp}), pre-LN, a linear classifier on [CLS] ({cfg.n_classes} classes).
- Preprocessing: pixels / 255, then (x − 0.5) / 0.5 per channel (Hugging Face ViT's convention).
- Objective: cross-entropy of the [CLS] classifier; each step draws a fresh batch of training images.
- Training: `attnlab train --model lecture-vit` — {t['steps']} steps × batch {t['batch']}, AdamW (peak lr {t['lr']},
  {t['warmup']} warm-up steps, cosine to 10%, weight decay {t['weight_decay']}), seed {t['seed']};
  {t['seconds'] / 60:.1f} min wall time on this project's 2-core CPU with {t['threads']} torch thread, shared with
  other jobs. Train and eval images are split by a hash of their pixels (1 in {EVAL_BUCKETS} is eval), so no
  held-out image was seen in training.

## Held-out accuracy

`{cmd_eval}` — fresh eval-split images: **{evaluation['accuracy']:.1%}** of {evaluation['n']}.
Per class: {per}.

## Does attention point at the red object?

`attnlab faithfulness --model lecture-vit --n {faith['n_examples']} --seed {faith['seed']}` — per method, the pointing
game (the map's top patch touches the red object) and the share of the map's mass inside the object (each patch
weighted by the share of its pixels inside). Chance: a random patch touches the object {c['pointing']:.1%} of the time;
a uniform map puts {c['mass']:.1%} of its mass inside (the object's area share).

| map | pointing game | mass inside the object |
| --- | ---: | ---: |
{methods}

## What to look at in the app

- Vision page, a bundled sample: the [CLS] row of heads {heads} puts that share of its attention (mean over
  {faith['n_examples']} held-out images) on the red object's patches — open them and compare with the distractors.
- The last layer's [CLS] attention (mean over heads) puts {last:.0%} inside the object (chance {c['mass']:.0%}): the
  selecting is done by the heads above (layer{'s' if len(layers) > 1 else ''} {', '.join(layers)}), so an overlay of the
  last layer alone says little; the maps that carry every layer (head mean, rollout, gradient rollout, relevance)
  keep {keep:.0%}–{keep_max:.0%} on it. Compare rollout and gradient-weighted rollout side by side.
- Mean attention distance per head by layer, and the position-embedding similarity on the patch grid (the ViT
  paper's two pictures).

## Reproduce

```
attnlab train --model lecture-vit --steps {t['steps']} --batch {t['batch']} --lr {t['lr']} --seed {t['seed']}
{cmd_eval}
attnlab faithfulness --model lecture-vit --n {faith['n_examples']} --json
```
"""


def write_card(folder: Path, text: str) -> Path:
    path = Path(folder) / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
