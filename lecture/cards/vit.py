"""The model card (README.md) of lecture-vit: recipe, cost, held-out accuracy, the learning curve, the ViT paper's
two pictures and what to look at. Numbers come in measured (held-out accuracy from evaluate_vit, attention/rollout
shares from the image faithfulness report, distances and the grid from analysis.probes.image_run.paper_pictures); this
module only writes them down."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.analysis.faithfulness.images import image_faithfulness
from attnlab.analysis.probes.image_run import paper_pictures, sincos_grid
from attnlab.lecture.cards.lecture import CURVE_PNG
from attnlab.lecture.evaluate_vit import evaluate_images
from attnlab.model.checkpoint import read_config
from attnlab.model.config import ModelConfig
from attnlab.model.lecture.shapes import (
    CLASSES,
    DISTRACTORS,
    EVAL_BUCKETS,
    IMAGE_SIZE,
    MARGIN,
    SHAPES,
    SIZES,
    shape_images,
)
from attnlab.model.registry import load_attnlab_folder

METHOD_NAMES = {"last_layer": "last-layer [CLS] attention (mean over heads)",
                "head_mean": "[CLS] attention, mean over all layers and heads",
                "rollout": "attention rollout (mean fusion, no discard)",
                "attention_norm": "attention norm, Kobayashi et al. 2020 (last layer, [CLS] row)",
                "value_zeroing": "value zeroing, Mohebbi et al. 2023 (last layer, [CLS] row)",
                "grad_rollout": "gradient-weighted rollout (correct class)",
                "relevance": "gradient relevance, Chefer et al. 2021 (correct class)",
                "input_x_gradient": "input × gradient (correct class)",
                "integrated_gradients": "integrated gradients (correct class)",
                "attention_x_gradient": "attention × gradient (correct class)"}


def _pictures(pic: dict, n: int) -> str:
    """The ViT paper's two pictures, in numbers."""
    tr = pic["trend"]
    start = ("" if "grid_r_start" not in pic else f" (the sine–cosine table they started from: "
             f"{pic['grid_r_start']:.2f}; started from N(0, 0.02) instead, this task teaches them a grid too: "
             "`docs/lecture-probes/VIT.md`, run a)")
    per = ", ".join(f"layer {i} {m:.1f} px ({lo:.1f}–{hi:.1f})" for i, (m, lo, hi)
                    in enumerate(zip(tr["layer_mean"], tr["layer_min"], tr["layer_max"])))
    return (f"Mean attention distance from a patch (mean over heads, range over heads; {n} held-out images): {per}; "
            f"the last layer looks **{tr['ratio']:.2f}×** as far as the first (attention spread evenly over every "
            f"patch: {pic['uniform']:.1f} px). Position embeddings: the correlation of their cosine similarity with "
            f"closeness on the patch grid is **{pic['grid_r']:.2f}**{start}.")


def _curve(curve: list[dict] | None) -> str:
    if not curve:
        return "No learning curve was recorded for this checkpoint."
    pts = ", ".join(f"{p['step']}: {p[k]:.1%}" for p in curve for k in p if k not in ("step", "seconds"))
    return (f"![held-out accuracy vs training step]({CURVE_PNG})\n\nHeld-out accuracy at each evaluation "
            f"(`curve.json`; step: accuracy): {pts}.")


def render_card(cfg: ModelConfig, training: dict, evaluation: dict, faith: dict, cmd_eval: str, pictures: dict,
                curve: list[dict] | None = None, n_pictures: int = 100) -> str:
    """README.md text from the training record, `attnlab eval`'s report, `attnlab faithfulness`'s report and
    `paper_pictures` over `n_pictures` held-out images."""
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
(`model/lecture/shapes.py`): a {IMAGE_SIZE}×{IMAGE_SIZE} dark canvas with 2–5 shapes ({', '.join(SHAPES)};
boxes of {SIZES[0]}–{SIZES[1] - 1} pixels, never touching), exactly one red and one blue, the others
{', '.join(DISTRACTORS)}. The label is **where the red object lies relative to the blue one** ({', '.join(CLASSES)}:
the larger of the horizontal and vertical offsets between their centres, which beats the smaller by at least
{MARGIN} pixels): a relation between two objects anywhere on the canvas. Every image carries the pixel mask of those
two objects, so every attention map can be checked against the truth. Made for teaching: {cfg.n_heads} heads ×
{cfg.n_layers} layers over an {cfg.grid}×{cfg.grid} patch grid.

## Model

- ViT: patch {cfg.patch_size}×{cfg.patch_size} (a strided convolution) → {cfg.n_patches} patch tokens + [CLS],
  {cfg.positional} position embeddings, {cfg.n_layers} layers × {cfg.n_heads} heads, d_model {cfg.d_model},
  MLP {cfg.hidden} ({cfg.mlp}), pre-LN, a linear classifier on [CLS] ({cfg.n_classes} classes).
- Preprocessing: pixels / 255, then (x − 0.5) / 0.5 per channel (Hugging Face ViT's convention).
- Objective: cross-entropy of the [CLS] classifier; each step draws a fresh batch of training images.
  {_extras(t)}
- Training: `attnlab train --model lecture-vit` — {t['steps']} steps (of a {t.get('of_steps', t['steps'])}-step
  schedule) × batch {t['batch']}, AdamW (peak lr {t['lr']}, {t['warmup']} warm-up steps, cosine to 10%, weight decay
  {t['weight_decay']}), seed {t['seed']};
  {t['seconds'] / 60:.1f} min wall time on this project's 2-core CPU with {t['threads']} torch thread, shared with
  other jobs. Train and eval images are split by a hash of their pixels (1 in {EVAL_BUCKETS} is eval), so no
  held-out image was seen in training.

## Held-out accuracy

`{cmd_eval}` — fresh eval-split images: **{evaluation['accuracy']:.1%}** of {evaluation['n']}.
Per class: {per}.

## Learning curve

{_curve(curve)}

## The ViT paper's two pictures

{_pictures(pictures, n_pictures)}

## Does attention point at the red and the blue object?

`attnlab faithfulness --model lecture-vit --n {faith['n_examples']} --seed {faith['seed']}` — per method, the pointing
game (the map's top patch touches the red or the blue object) and the share of the map's mass inside the two
objects (each patch weighted by the share of its pixels inside). Chance: a random patch touches them
{c['pointing']:.1%} of the time; a uniform map puts {c['mass']:.1%} of its mass inside (the objects' area share).

| map | pointing game | mass inside the two objects |
| --- | ---: | ---: |
{methods}

## What to look at in the app

- Vision page, a bundled sample: the [CLS] row of heads {heads} puts that share of its attention (mean over
  {faith['n_examples']} held-out images) on the red and blue objects' patches — open them and compare with the
  distractors.
- The last layer's [CLS] attention (mean over heads) puts {last:.0%} inside the objects (chance {c['mass']:.0%}); the
  heads that put the most there are in layer{'s' if len(layers) > 1 else ''} {', '.join(layers)}. The other maps
  (head mean, rollout, attention norm, value zeroing, gradient rollout, relevance, attributions) keep
  {keep:.0%}–{keep_max:.0%} on them. Compare rollout and gradient-weighted rollout side by side.
- Mean attention distance per head by layer, and the position-embedding similarity on the patch grid (the ViT
  paper's two pictures; numbers above).

## Reproduce

```
attnlab train --model lecture-vit --steps {t.get('of_steps', t['steps'])} --stop {t['steps']} --batch {t['batch']} --lr {t['lr']} --seed {t['seed']} --warmup {t['warmup']}
{cmd_eval}
attnlab faithfulness --model lecture-vit --n {faith['n_examples']} --json
```

`attnlab train` writes this card too; the extras are the recipe's (`VitRecipe` in `lecture/train_vit.py`):
sincos {t.get('sincos', 0.0)}, local {t.get('local', 0.0)}, inpaint {t.get('inpaint', 0.0)} (block
{t.get('inpaint_layer', 1)}, share {t.get('inpaint_share', 0.25)}).
"""


def _extras(t: dict) -> str:
    """The training-only extras of lecture/vit_aux.py that this run used, in words."""
    out = []
    if t.get("sincos"):
        out.append(f"The learned position embeddings start from {t['sincos']} × the 2-D sine–cosine table (MAE's "
                   "fixed one) and are trained like every other weight.")
    if t.get("local"):
        out.append(f"A locality prior on block 0 (weight {t['local']}): the loss adds the mean attention mass a patch "
                   "puts on patches outside its 3×3 neighbourhood in that block, so the first block looks nearby "
                   "(the later blocks have no such term).")
    if t.get("inpaint"):
        out.append(f"Masked-patch inpainting (weight {t['inpaint']}): {t['inpaint_share']:.0%} of the patches are "
                   "painted over with the background and a linear head restores their pixels from the state after "
                   f"block {t['inpaint_layer']}.")
    if not out:
        return "No auxiliary loss."
    return " ".join(out) + " All in `lecture/vit_aux.py`, used in training only: the saved model is a plain ViT."


def write_card(folder: Path, text: str) -> Path:
    path = Path(folder) / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


def measure_and_write(folder: Path, n_eval: int = 1000, n_faith: int = 200, n_pictures: int = 100) -> Path:
    """Measure the checkpoint in `folder` (held-out accuracy, image faithfulness, the paper's pictures) and write
    lecture-vit's README.md there; returns its path."""
    folder = Path(folder)
    lm = load_attnlab_folder(folder, "lecture-vit", str(folder))
    seed = 1
    evaluation = evaluate_images(lm, n_eval, seed)
    faith = image_faithfulness(lm, n_faith, 0)
    training = read_config(folder)["training"]
    pictures = paper_pictures(lm, [im.image for im in shape_images(n_pictures, 0, "eval")])
    if training.get("sincos"):  # the grid the position embeddings started from
        pictures["grid_r_start"] = sincos_grid(lm.patch_grid[0], lm.cfg.d_model)
    curve = json.loads((folder / "curve.json").read_text()) if (folder / "curve.json").is_file() else None
    text = render_card(lm.cfg, training, evaluation, faith, f"attnlab eval --model lecture-vit --n {n_eval} --seed {seed}",
                       pictures, curve, n_pictures)
    return write_card(folder, text)
