"""Train the three bundled lecture models on the generated corpus (CPU-friendly, seeded, reproducible).

    python -m model.lecture.train --model lecture-decoder          # or: attnlab train --model ...

One recipe per model (config, steps, batch, learning rate). Batches come from the corpus's
deterministic stream (`model_stream(kind, seed)`), are padded with [PAD] on the right, and the loss
covers real targets only:
  decoder  next-token loss on every token, answers weight 1 and other tokens OTHER_WEIGHT;
  encoder  masked-LM loss on the answer positions (all [MASK]ed) plus EXTRA_MASK of the other tokens
           (weight EXTRA_WEIGHT), never a source/support position (nor any bracket, where one hidden
           bracket changes the answer);
  encdec   teacher forcing: the decoder reads tgt[:-1] and predicts tgt[1:] ([EOS] included).
AdamW with linear warm-up then cosine decay to 10%; gradients clipped at 1. The same seed gives the
same weights (single-threaded determinism aside: set --threads 1 for bit-exact runs).

Data: chunks of CHUNK steps' examples, each drawn from its own part of the seed's stream and tokenised
at once (`Bank`), so the batch of any step is a pure function of (recipe, step): a run saved every
--save-every steps (resume.py) continues with `--resume` exactly as if it had never stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from random import Random

import torch
import torch.nn.functional as F

from model import hooks
from model.checkpoint import load_folder, save_folder
from model.config import ModelConfig
from model.registry import BUNDLED_DIR, load_attnlab_folder
from model.tokenizer import HFTokenizer
from model.transformer import build_model

from .batches import IGNORE, Bank, Batcher, denser
from .card import EVAL_SEED, finalize, write_card
from .corpus import model_stream
from .evaluate import evaluate
from .resume import load_state, save_state, state_dir
from .tasks_base import MAX_LEN
from .tokenizer import build_tokenizer

SPECIALS = {"bos": "[BOS]", "eos": "[EOS]", "pad": "[PAD]", "mask": "[MASK]"}


@dataclass(frozen=True)
class Recipe:
    corpus: str  # "decoder" | "encoder" | "encdec" (the corpus mixture, see corpus.MODELS)
    cfg: ModelConfig
    steps: int = 3000
    batch: int = 32
    lr: float = 2e-3
    warmup: int = 150
    weight_decay: float = 0.01
    seed: int = 0
    eval_every: int = 500
    mix: dict | None = None  # task weights of the training stream (default: the corpus mixture)
    init: str | None = None  # start from this checkpoint folder instead of random weights
    questions: int = 1  # retrieval: up to this many questions per training story (see `denser`)
    mask_share: float = 0.0  # encoder: share of induction words / closers hidden in training (see `denser`)
    hint: float = 0.0  # weight of the attention hint (see `hint_loss`) at step 0, falling linearly to 0 ...
    hint_steps: int = 0  # ... at this step; from then on the plain loss alone
    hint_tasks: tuple = ("retrieval",)  # tasks whose answers the hint covers
    attn_only: int = 0  # the MLPs start at zero output and stay frozen for this many steps, then join


_SHARED = dict(vocab_size=186, d_model=128, n_heads=4, n_layers=4, max_len=MAX_LEN, norm="pre", mlp="gelu")
RECIPES = {
    # Decoder and encoder: same size, same positions, same corpus texts — only the mask and the head differ.
    "lecture-decoder": Recipe("decoder", ModelConfig(arch="decoder", positional="rope", **_SHARED), steps=2500),
    "lecture-encoder": Recipe("encoder", ModelConfig(arch="encoder", output_head="mlm", positional="rope", **_SHARED),
                              steps=2500),
    # Learned positions: on the same 0.02 scale as the token embeddings (a sinusoidal table of norm ~√d
    # drowns them at init and trains far slower here).
    "lecture-encdec": Recipe("encdec", ModelConfig(arch="encdec", positional="learned", **{
        **_SHARED, "n_layers": 3}), steps=1500),
}
TINY = ModelConfig(arch="decoder", vocab_size=186, d_model=32, n_heads=2, n_layers=1, max_len=MAX_LEN,
                   positional="rope")


def forward_loss(model, kind: str, batch: dict, backend: str = "sdpa") -> torch.Tensor:
    """Weighted mean cross-entropy over the real targets of one batch."""
    if kind == "encdec":
        logits = model(batch["src"], batch["x"], src_mask=batch["src_mask"], backend=backend).logits
    elif kind == "encoder":
        logits = model(batch["x"], attention_mask=batch["attention_mask"], backend=backend).logits
    else:
        logits = model(batch["x"], backend=backend).logits  # right padding: causal rows never see it
    ce = F.cross_entropy(logits.flatten(0, 1).float(), batch["y"].flatten(), ignore_index=IGNORE, reduction="none")
    w = batch["w"].flatten()
    return (ce * w).sum() / w.sum().clamp_min(1.0)


def hint_loss(patterns: list[torch.Tensor], hint: torch.Tensor) -> torch.Tensor:
    """−mean log weight that the best single head puts from each answer's query row on its source, per
    task, averaged over the tasks in the batch.

    A hint, not a wiring: the model picks the head (per task, the one already closest over the batch), and
    the bridge facts of two-hop questions are not hinted. One head for a task's whole batch, not the best
    head per example, which several heads each locked on a different candidate would satisfy without
    choosing. `patterns`: per layer [B, H, T, T] with gradients; `hint` [N, 4] (example, query row,
    source, task number)."""
    b, q, s, task = hint.unbind(-1)
    logw = torch.log(torch.stack([p[b, :, q, s] for p in patterns]) + 1e-6)  # [L, N, H]
    return torch.stack([-logw[:, task == t].mean(1).amax() for t in task.unique()]).mean()


def lr_at(step: int, recipe: Recipe) -> float:
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    t = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def make_optimizer(model, recipe: Recipe) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in name else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.98))


# -- training -------------------------------------------------------------------------------------------
CHUNK = 200  # steps per tokenised chunk of the stream


def batches_from(recipe: Recipe, start: int = 0):
    """The training batches from step `start` on: chunk k (steps k·CHUNK ...) is part k of the seed's
    stream, densified and tokenised at once, its rows dealt out in length-sorted batches."""
    batcher = Batcher(recipe.corpus, recipe.hint_tasks if recipe.hint > 0 and recipe.hint_steps > 0 else ())
    k, skip = divmod(start, CHUNK)
    while True:
        rng = Random(f"attnlab.train|{recipe.corpus}|{recipe.seed}|{k}")
        data = model_stream(recipe.corpus, recipe.seed, split="train", weights=recipe.mix, part=k)
        bank = Bank(list(islice(denser(data, recipe, rng), CHUNK * recipe.batch)), batcher, rng)
        gen = torch.Generator().manual_seed(recipe.seed * 1_000_003 + k)
        for rows in bank.order(recipe.batch, gen)[skip:]:
            yield bank(rows)
        k, skip = k + 1, 0


def freeze_mlps(model: torch.nn.Module, frozen: bool) -> None:
    for name, p in model.named_parameters():
        if ".mlp." in name:
            p.requires_grad_(not frozen)


@dataclass
class Result:
    model: torch.nn.Module
    cfg: ModelConfig
    losses: list[float]
    seconds: float
    steps: int
    curve: list[dict] = field(default_factory=list)  # {"step", "seconds", task: accuracy, ...} per evaluation


def train(recipe: Recipe, *, progress: bool = True, on_eval=None, log=None, out: Path | None = None,
          save_every: int = 0, resume: bool = False, until: int | None = None) -> Result:
    """Run one recipe from scratch, or with `resume` from the state saved in `out`. `on_eval(step, model,
    seconds)` is called every eval_every steps and at the end; a dict it returns joins the curve. With
    `out` and `save_every`, the state is saved every save_every steps and at the end; `until` stops early."""
    from tqdm import tqdm

    torch.manual_seed(recipe.seed)
    model = build_model(recipe.cfg)
    if recipe.init:
        model.load_state_dict(load_folder(recipe.init)[0].state_dict())
    if recipe.attn_only > 0:
        with torch.no_grad():
            for blk in model.modules():
                if hasattr(blk, "mlp") and hasattr(blk.mlp, "down"):
                    blk.mlp.down.weight.zero_()
                    blk.mlp.down.bias.zero_()
    model.train()
    opt = make_optimizer(model, recipe)
    losses: list[float] = []
    curve: list[dict] = []
    first, before = 0, 0.0
    if resume:
        info = load_state(out, model, opt)
        first, before, losses, curve = info["step"], info["seconds"], info["losses"], info["curve"]
    start = time.perf_counter() - before
    batches = batches_from(recipe, first)
    stop = min(until or recipe.steps, recipe.steps)
    bar = tqdm(range(first, stop), desc=recipe.corpus, disable=not progress, mininterval=2.0)
    for step in bar:
        freeze_mlps(model, step < recipe.attn_only)
        batch = next(batches)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, recipe)
        if step < recipe.hint_steps and recipe.hint > 0 and len(batch["hint"]):
            with hooks.capture("*.hook_pattern", records=False, detach=False) as cap:
                loss = forward_loss(model, recipe.corpus, batch, backend="eager")
            patterns = [cap.tensor(n) for n in cap.tensors if ".cross" not in n]
            loss = loss + recipe.hint * (1 - step / recipe.hint_steps) * hint_loss(patterns, batch["hint"])
        else:
            loss = forward_loss(model, recipe.corpus, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        last = step + 1 == stop
        if on_eval is not None and ((step + 1) % recipe.eval_every == 0 or step + 1 == recipe.steps):
            model.eval()
            point = on_eval(step + 1, model, time.perf_counter() - start)
            if point:
                curve.append({"step": step + 1, "seconds": round(time.perf_counter() - start, 1), **point})
            model.train()
        if out is not None and save_every and ((step + 1) % save_every == 0 or last):
            save_state(out, model, opt, {"step": step + 1, "seconds": time.perf_counter() - start,
                                         "losses": losses, "curve": curve})
        if log is not None and (step + 1) % 100 == 0:
            log(f"step {step + 1} loss {sum(losses[-100:]) / 100:.4f} lr {lr_at(step, recipe):.2e} "
                f"{time.perf_counter() - start:.0f}s")
    return Result(model.eval(), recipe.cfg, losses, time.perf_counter() - start, stop, curve)


def curve_point(metrics: dict) -> dict:
    """One learning-curve point: accuracy per task, and retrieval's one- and two-hop kinds apart."""
    point = {t: round(m["accuracy"], 4) for t, m in metrics["tasks"].items()}
    kinds = metrics["tasks"].get("retrieval", {}).get("kinds", {})
    for name, test in (("retrieval one-hop", lambda k: not k.startswith("friend_")),
                       ("retrieval two-hop", lambda k: k.startswith("friend_"))):
        rows = [m for k, m in kinds.items() if test(k)]
        if rows:
            point[name] = round(sum(m["accuracy"] * m["n"] for m in rows) / sum(m["n"] for m in rows), 4)
    return point


def save(model, cfg: ModelConfig, folder: Path, extra: dict | None = None) -> Path:
    return save_folder(model, cfg, folder, tokenizer=HFTokenizer(build_tokenizer()), specials=SPECIALS, extra=extra)


# -- command line ---------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, choices=sorted(RECIPES), help="which bundled model to train")
    p.add_argument("--out", default=None, help="output folder (default: the bundled checkpoint folder)")
    p.add_argument("--steps", type=int, default=None, help="override the recipe's number of steps")
    p.add_argument("--batch", type=int, default=None, help="override the batch size")
    p.add_argument("--lr", type=float, default=None, help="override the peak learning rate")
    p.add_argument("--seed", type=int, default=None, help="override the seed")
    p.add_argument("--warmup", type=int, default=None, help="override the warm-up steps")
    p.add_argument("--questions", type=int, default=None, help="override questions per retrieval story")
    p.add_argument("--mask-share", type=float, default=None, help="override the encoder's extra hidden share")
    p.add_argument("--hint", type=float, default=None, help="override the attention hint's starting weight")
    p.add_argument("--hint-steps", type=int, default=None, help="override the steps the attention hint lasts")
    p.add_argument("--hint-tasks", default=None, help="tasks the attention hint covers, e.g. retrieval,induction")
    p.add_argument("--context", type=int, default=None, help="override the model's context (RoPE models; room for "
                   "extra questions)")
    p.add_argument("--mix", default=None, help="training task weights, e.g. retrieval=0.5,induction=0.5")
    p.add_argument("--init", default=None, help="start from this checkpoint folder (fine-tuning)")
    p.add_argument("--attn-only", type=int, default=None, help="override the steps before the MLPs join")
    p.add_argument("--weight-decay", type=float, default=None, help="override the weight decay")
    p.add_argument("--eval-every", type=int, default=None, help="override how often to evaluate (and save)")
    p.add_argument("--save-every", type=int, default=200, help="save the resumable state (OUT/resume/) this often")
    p.add_argument("--resume", action="store_true", help="continue from the state saved in the output folder")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: fastest on a busy 2-core machine)")
    p.add_argument("--eval-n", type=int, default=400, help="held-out examples per evaluation")
    p.add_argument("--no-card", action="store_true", help="do not write README.md")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    torch.set_num_threads(max(1, args.threads))
    recipe = RECIPES[args.model]
    names = ("steps", "batch", "lr", "seed", "warmup", "init", "questions", "mask_share", "hint", "hint_steps",
             "attn_only", "weight_decay", "eval_every")
    overrides = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.hint_tasks:
        overrides["hint_tasks"] = tuple(args.hint_tasks.split(","))
    if args.context:
        overrides["cfg"] = replace(recipe.cfg, max_len=args.context)
    if args.mix:
        overrides["mix"] = {k: float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    recipe = replace(recipe, **overrides)
    out = Path(args.out) if args.out else BUNDLED_DIR / args.model

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def training(step, seconds):
        return {"recipe": args.model, "steps": step, "of_steps": recipe.steps, "batch": recipe.batch, "lr": recipe.lr,
                "seed": recipe.seed, "seconds": round(seconds, 1), "threads": args.threads, "warmup": recipe.warmup,
                "mix": recipe.mix, "init": recipe.init, "questions": recipe.questions,
                "mask_share": recipe.mask_share, "hint": recipe.hint, "hint_steps": recipe.hint_steps,
                "hint_tasks": list(recipe.hint_tasks), "attn_only": recipe.attn_only,
                "weight_decay": recipe.weight_decay}

    state = state_dir(out) / "state.json"
    curve = json.loads(state.read_text())["curve"] if args.resume and state.is_file() else []

    def on_eval(step, model, seconds):
        save(model, recipe.cfg, out, extra={"training": training(step, seconds)})
        lm = load_attnlab_folder(out, args.model, str(out))
        metrics = evaluate(lm, args.eval_n, seed=EVAL_SEED, detail=True)
        point = curve_point(metrics)
        log(f"eval @ {step} ({seconds:.0f}s): " + json.dumps(point))
        curve.append({"step": step, "seconds": round(seconds, 1), **point})
        (out / "curve.json").write_text(json.dumps(curve) + "\n")
        if not args.no_card:
            write_card(out, args.model, recipe.cfg, training(step, seconds), metrics, eval_n=args.eval_n, curve=curve)
        return point

    res = train(recipe, progress=not args.quiet, on_eval=on_eval, log=log, out=out, save_every=args.save_every,
                resume=args.resume)
    log(f"done: {res.steps} steps in {res.seconds:.0f}s -> {out}")
    if not args.no_card:
        finalize(out, args.model)
        log(f"model card: {out / 'README.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.lecture.train", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
