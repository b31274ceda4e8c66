"""Train lecture-vit, the bundled vision transformer, on generated shape images (CPU-friendly, seeded).

    attnlab train --model lecture-vit [--steps N]      # or: python -m attnlab.lecture.train_vit

Each step draws a fresh batch of training images (model/lecture/shapes.py: the label is where the red object lies
relative to the blue one); cross-entropy on the [CLS] classifier, plus the training-only extras of
lecture/vit_aux.py: position embeddings started from the 2-D sine–cosine table (`sincos`, its scale), block
0's locality penalty (weight `local`) and masked-patch inpainting (weight `inpaint`); AdamW with linear warm-up then
cosine decay to 10%, gradients clipped at 1. Held-out accuracy is measured on eval-split images (disjoint from
training by hash); the curve (accuracy vs step) is written next to the checkpoint as curve.json and a PNG."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from attnlab.lecture.cards.lecture import CURVE_PNG
from attnlab.lecture.cards.vit import measure_and_write
from attnlab.lecture.curve import draw
from attnlab.lecture.evaluate_vit import predict
from attnlab.lecture.vit_aux import Inpainter, Locality, sincos_init
from attnlab.model.checkpoint import save_folder
from attnlab.model.config import ModelConfig
from attnlab.model.images import ImagePrep
from attnlab.model.lecture.shapes import BACKGROUND, CLASSES, IMAGE_SIZE, shape_images
from attnlab.model.registry import BUNDLED_DIR
from attnlab.model.transformer import build_model

NAME = "lecture-vit"
EVAL_SEED = 1
PREP = ImagePrep(size=(IMAGE_SIZE, IMAGE_SIZE), class_names=CLASSES)
CONFIG = ModelConfig(arch="vit", image_size=IMAGE_SIZE, patch_size=4, n_classes=len(CLASSES), d_model=64,
                     n_heads=4, n_layers=4, positional="learned", norm="pre", mlp="gelu")


@dataclass(frozen=True)
class VitRecipe:
    cfg: ModelConfig = CONFIG
    steps: int = 2000  # the learning-rate schedule's length
    stop: int | None = None  # stop after this many steps (None: steps), on the same schedule
    batch: int = 32
    lr: float = 1.5e-3
    warmup: int = 100
    weight_decay: float = 0.05
    seed: int = 0
    eval_every: int = 250
    sincos: float = 1.0  # scale of the 2-D sine–cosine start of the position embeddings (0: N(0, 0.02) as usual)
    local: float = 1.0  # weight of block 0's locality penalty (0: none)
    inpaint: float = 0.0  # weight of the masked-patch inpainting loss (0: none)
    inpaint_layer: int = 1  # the block whose output the inpainting head reads
    inpaint_share: float = 0.25  # share of patches painted over per image


@dataclass
class VitResult:
    model: torch.nn.Module
    losses: list[float]  # one per step
    seconds: float


def batch_of(n: int, seed: int, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """pixels [n, 3, H, W] and labels [n] of fresh generated images."""
    ims = shape_images(n, seed, split)
    return PREP.tensor([im.image for im in ims]), torch.tensor([im.label for im in ims])


def lr_at(step: int, r: VitRecipe) -> float:
    if step < r.warmup:
        return r.lr * (step + 1) / r.warmup
    t = (step - r.warmup) / max(1, r.steps - r.warmup)
    return r.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def accuracy(model, n: int = 400, seed: int = EVAL_SEED) -> float:
    """Share of `n` held-out images whose predicted class is where the red object lies relative to the blue one."""
    ims = shape_images(n, seed, "eval")
    return float((predict(model, PREP, [im.image for im in ims]) == np.array([im.label for im in ims])).mean())


def train(r: VitRecipe, *, on_eval=None, log=None, batches=None) -> VitResult:
    """Train from seeded random weights; `on_eval(step, model, seconds)` every eval_every steps and at the end.
    `batches(step) -> (pixels, labels)` replaces the fresh generated batches (tests)."""
    torch.manual_seed(r.seed)
    model = build_model(r.cfg).train()
    if r.sincos:
        sincos_init(model, r.sincos)
    local = Locality(model) if r.local else None
    inpaint = Inpainter(model, PREP, BACKGROUND, r.inpaint_layer, r.inpaint_share) if r.inpaint else None
    gen = torch.Generator().manual_seed(r.seed)
    named = [*model.named_parameters(), *(inpaint.named_parameters(prefix="inpaint") if inpaint else [])]
    decay = [p for n, p in named if p.dim() >= 2 and not n.startswith("embed.pos")]
    rest = [p for n, p in named if not (p.dim() >= 2 and not n.startswith("embed.pos"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=r.lr, betas=(0.9, 0.98))
    losses, t0 = [], time.perf_counter()
    for step in range(min(r.stop or r.steps, r.steps)):
        pixels, labels = batches(step) if batches else batch_of(r.batch, r.seed * 1_000_003 + step)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, r)
        loss = F.cross_entropy(model(pixels, backend="sdpa").logits, labels)
        if local is not None:
            loss = loss + r.local * local.penalty()
        if inpaint is not None:
            loss = loss + r.inpaint * inpaint.loss(model, pixels, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        opt.step()
        losses.append(loss.item())
        if log and (step + 1) % 50 == 0:
            log(f"step {step + 1}/{r.steps} loss {np.mean(losses[-50:]):.4f} ({time.perf_counter() - t0:.0f}s)")
        if on_eval and ((step + 1) % r.eval_every == 0 or step + 1 == min(r.stop or r.steps, r.steps)):
            on_eval(step + 1, model.eval(), time.perf_counter() - t0)
            model.train()
    return VitResult(model.eval(), losses, time.perf_counter() - t0)


def save(model, cfg: ModelConfig, folder: Path, training: dict, accuracy_: float) -> Path:
    """The attnlab folder: config.json (with the preprocessing and class names), model.safetensors."""
    return save_folder(model, cfg, folder, extra={"image": PREP.to_dict(), "training": training,
                                                  "card": {"task": "where the red object lies relative to the blue one",
                                                           "classes": list(CLASSES),
                                                           "heldout_accuracy": round(accuracy_, 4)}})


# -- command line ---------------------------------------------------------------------------------------
OPTIONS = ("steps", "stop", "batch", "lr", "seed", "warmup", "sincos", "local", "inpaint", "inpaint_layer", "inpaint_share")


def run(args) -> int:
    """Train with the recipe (overridden by the OPTIONS), save the model and the curve after every evaluation."""
    torch.set_num_threads(max(1, getattr(args, "threads", 1) or 1))
    r = replace(VitRecipe(), **{k: getattr(args, k) for k in OPTIONS if getattr(args, k, None) is not None})
    out = Path(args.out) if getattr(args, "out", None) else BUNDLED_DIR / NAME
    eval_n = getattr(args, "eval_n", 400) or 400
    curve: list[dict] = []

    def log(msg: str) -> None:
        if not getattr(args, "quiet", False) or msg.startswith("eval"):
            print(msg, file=sys.stderr, flush=True)

    def on_eval(step, model, seconds):
        acc = accuracy(model, eval_n)
        curve.append({"step": step, "seconds": round(seconds, 1), "left/right/above/below": acc})
        training = {"recipe": NAME, "steps": step, "of_steps": r.steps, "batch": r.batch, "lr": r.lr, "seed": r.seed,
                    "warmup": r.warmup, "weight_decay": r.weight_decay, "sincos": r.sincos,
                    "local": r.local, "inpaint": r.inpaint,
                    "inpaint_layer": r.inpaint_layer, "inpaint_share": r.inpaint_share, "seconds": round(seconds, 1),
                    "threads": torch.get_num_threads(), "eval_n": eval_n, "eval_seed": EVAL_SEED}
        save(model, r.cfg, out, training, acc)
        (out / "curve.json").write_text(json.dumps(curve, indent=1) + "\n")
        draw(curve, out / CURVE_PNG, f"{NAME}: held-out accuracy ({eval_n} images) vs step")
        log(f"eval @ {step} ({seconds:.0f}s): accuracy {acc:.4f} -> {out}")

    res = train(r, on_eval=on_eval, log=log)
    log(f"done: {len(res.losses)} steps in {res.seconds:.0f}s -> {out}")
    if not getattr(args, "no_card", False):
        print(f"model card: {measure_and_write(out)}", file=sys.stderr)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="output folder (default: the bundled checkpoint folder)")
    for k, t in zip(OPTIONS, (int, int, int, float, int, int, float, float, float, int, float)):
        p.add_argument(f"--{k.replace('_', '-')}", type=t, default=None, help=f"override the recipe's {k}")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--eval-n", type=int, default=400, help="held-out images per evaluation")
    p.add_argument("--no-card", action="store_true", help="do not write README.md")
    p.add_argument("--quiet", action="store_true", help="log evaluations only")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab.lecture.train_vit", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
