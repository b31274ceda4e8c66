"""Train the three bundled lecture models on the generated corpus (CPU-friendly, seeded, reproducible).

    attnlab train --model lecture-decoder          # or: python -m attnlab.lecture.train_command ...

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

import math
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from random import Random

import torch
import torch.nn.functional as F
from attnlab.lecture.batches import IGNORE, Bank, Batcher, denser
from attnlab.lecture.resume import load_state, save_state
from attnlab.model import hooks
from attnlab.model.checkpoint import load_folder, save_folder
from attnlab.model.config import ModelConfig
from attnlab.model.lecture.corpus import model_stream, vocabulary
from attnlab.model.lecture.tasks_base import MAX_LEN
from attnlab.model.lecture.tokenizer import build_tokenizer
from attnlab.model.moe import router_loss, upcycle
from attnlab.model.registry import BUNDLED_DIR
from attnlab.model.tokenizer import HFTokenizer
from attnlab.model.transformer import build_model

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
    one_hop: int = 0  # curriculum: retrieval is one-hop only in the chunks that start before this step


_SHARED = dict(vocab_size=len(vocabulary()), d_model=128, n_heads=4, n_layers=4, max_len=MAX_LEN, norm="pre", mlp="gelu")
RECIPES = {
    # Decoder and encoder: same size, same positions, same corpus texts — only the mask and the head differ.
    "lecture-decoder": Recipe("decoder", ModelConfig(arch="decoder", positional="rope", **_SHARED), steps=2500),
    "lecture-encoder": Recipe("encoder", ModelConfig(arch="encoder", output_head="mlm", positional="rope", **_SHARED),
                              steps=2500),
    # Learned positions: on the same 0.02 scale as the token embeddings (a sinusoidal table of norm ~√d
    # drowns them at init and trains far slower here).
    "lecture-encdec": Recipe("encdec", ModelConfig(arch="encdec", positional="learned", **{
        **_SHARED, "n_layers": 3}), steps=1500),
    # Mixture of experts: lecture-decoder's attention and embeddings, its MLPs cut into 4 experts (top-2).
    "lecture-moe": Recipe("decoder", ModelConfig(arch="decoder", positional="rope", **{
        **_SHARED, "mlp": "moe", "n_experts": 4, "top_k": 2, "expert_mlp": "gelu", "d_mlp": 128}),
        steps=1500, lr=1e-3, warmup=50, init=str(BUNDLED_DIR / "lecture-decoder")),
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
    return (ce * w).sum() / w.sum().clamp_min(1.0) + router_loss(model)  # + the MoE load-balancing term


def hint_loss(patterns: list[torch.Tensor], hint: torch.Tensor, halves: tuple = ()) -> torch.Tensor:
    """−mean log weight that the best single head puts from each answer's query row on its source, per
    task, averaged over the tasks in the batch.

    A hint, not a wiring: the model picks the head (per task, the one already closest over the batch), and
    the bridge facts of two-hop questions are hinted only as tasks of their own ("-bridge"). One head for a task's whole batch, not the best
    head per example, which several heads each locked on a different candidate would satisfy without
    choosing. Task numbers in `halves` are the first half of a lookup ("retrieval-owner", "induction-prev":
    see `Batcher._hints`): their head comes from the lower half of the layers and, when there are such
    tasks, every other task's from the upper half, so that the lookup can read what the first half wrote.
    `patterns`: per layer [B, H, T, T] with gradients; `hint` [N, 4] (example, query row, source, task number)."""
    b, q, s, task = hint.unbind(-1)
    logw = torch.log(torch.stack([p[b, :, q, s] for p in patterns]) + 1e-6)  # [L, N, H]
    mid = len(patterns) // 2
    lower, upper = slice(0, max(1, mid)), slice(mid if halves else 0, None)
    return torch.stack([-logw[lower if int(t) in halves else upper][:, task == t].mean(1).amax()
                        for t in task.unique()]).mean()


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
        dense = denser(data, recipe, rng, one_hop=k * CHUNK < recipe.one_hop)
        bank = Bank(list(islice(dense, CHUNK * recipe.batch)), batcher, rng)
        gen = torch.Generator().manual_seed(recipe.seed * 1_000_003 + k)
        for rows in bank.order(recipe.batch, gen)[skip:]:
            yield bank(rows)
        k, skip = k + 1, 0


def grow_vocab(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` from a checkpoint of a smaller vocabulary, for `model`: every tensor whose first dimension
    is the vocabulary keeps its rows (the old ids, which `vocabulary()` keeps as a prefix) and takes
    `model`'s own initial rows for the new words."""
    out = dict(state)
    for k, v in model.state_dict().items():
        old = state.get(k)
        if old is not None and old.shape != v.shape and old.shape[1:] == v.shape[1:] and old.shape[0] < v.shape[0]:
            out[k] = torch.cat([old, v[old.shape[0]:].clone()])  # [V_old + new, ...]
    return out


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
          save_every: int = 0, resume: bool = False, until: int | None = None, device: str = "cpu") -> Result:
    """Run one recipe from scratch, or with `resume` from the state saved in `out`, on `device`. `on_eval(step,
    model, seconds)` is called every eval_every steps and at the end; a dict it returns joins the curve. With
    `out` and `save_every`, the state is saved every save_every steps and at the end; `until` stops early."""
    from tqdm import tqdm

    torch.manual_seed(recipe.seed)
    model = build_model(recipe.cfg)
    if recipe.init:
        model.load_state_dict(upcycle(model, grow_vocab(model, load_folder(recipe.init)[0].state_dict())))
    if recipe.attn_only > 0:
        with torch.no_grad():
            for blk in model.modules():
                if hasattr(blk, "mlp") and hasattr(blk.mlp, "down"):
                    blk.mlp.down.weight.zero_()
                    blk.mlp.down.bias.zero_()
    model.to(device).train()
    opt = make_optimizer(model, recipe)
    losses: list[float] = []
    curve: list[dict] = []
    first, before = 0, 0.0
    if resume:
        info = load_state(out, model, opt)
        first, before, losses, curve = info["step"], info["seconds"], info["losses"], info["curve"]
    start = time.perf_counter() - before
    batches = batches_from(recipe, first)
    halves = tuple(i for i, t in enumerate(recipe.hint_tasks) if t.endswith(("-owner", "-asker", "-prev", "-bridge")))
    stop = min(until or recipe.steps, recipe.steps)
    bar = tqdm(range(first, stop), desc=recipe.corpus, disable=not progress, mininterval=2.0)
    for step in bar:
        freeze_mlps(model, step < recipe.attn_only)
        batch = {k: v.to(device) for k, v in next(batches).items()}
        for g in opt.param_groups:
            g["lr"] = lr_at(step, recipe)
        if step < recipe.hint_steps and recipe.hint > 0 and len(batch["hint"]):
            with hooks.capture("*.hook_pattern", records=False, detach=False) as cap:
                loss = forward_loss(model, recipe.corpus, batch, backend="eager")
            patterns = [cap.tensor(n) for n in cap.tensors if ".cross" not in n]
            loss = loss + recipe.hint * (1 - step / recipe.hint_steps) * hint_loss(patterns, batch["hint"], halves)
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
    return Result(model.cpu().eval(), recipe.cfg, losses, time.perf_counter() - start, stop, curve)


def save(model, cfg: ModelConfig, folder: Path, extra: dict | None = None) -> Path:
    return save_folder(model, cfg, folder, tokenizer=HFTokenizer(build_tokenizer()), specials=SPECIALS, extra=extra)
