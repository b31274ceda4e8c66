"""`attnlab train` (and `python -m attnlab.lecture.train_command`): a recipe with the command line's overrides,
evaluated and saved every --eval-every steps (weights, card, learning curve), resumable with --resume."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
from attnlab.lecture import train_vit
from attnlab.lecture.cards.lecture import EVAL_SEED, finalize, write_card
from attnlab.lecture.evaluate import evaluate
from attnlab.lecture.resume import state_dir
from attnlab.lecture.train import RECIPES, save, train
from attnlab.model.registry import BUNDLED_DIR, load_attnlab_folder


def curve_point(metrics: dict) -> dict:
    """One learning-curve point: accuracy per task, retrieval's one- and two-hop kinds apart, and the
    lecture story's two-hop question ("story best friend")."""
    point = {t: round(m["accuracy"], 4) for t, m in metrics["tasks"].items()}
    kinds = metrics["tasks"].get("retrieval", {}).get("kinds", {})
    for name, test in (("retrieval one-hop", lambda k: not k.startswith("friend_")),
                       ("retrieval two-hop", lambda k: k.startswith("friend_"))):
        rows = [m for k, m in kinds.items() if test(k)]
        if rows:
            point[name] = round(sum(m["accuracy"] * m["n"] for m in rows) / sum(m["n"] for m in rows), 4)
    if "best" in metrics["tasks"].get("story", {}).get("kinds", {}):
        point["story best friend"] = round(metrics["tasks"]["story"]["kinds"]["best"]["accuracy"], 4)
    return point


def add_arguments(p: argparse.ArgumentParser, more_models: tuple[str, ...] = ()) -> None:
    """The train options; `more_models`: --model choices trained elsewhere (the CLI adds lecture-vit)."""
    p.add_argument("--model", required=True, choices=[*sorted(RECIPES), *more_models], help="which bundled model to train")
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
    p.add_argument("--one-hop", type=int, default=None, help="curriculum: one-hop retrieval only before this step")
    p.add_argument("--weight-decay", type=float, default=None, help="override the weight decay")
    p.add_argument("--eval-every", type=int, default=None, help="override how often to evaluate (and save)")
    p.add_argument("--save-every", type=int, default=200, help="save the resumable state (OUT/resume/) this often")
    p.add_argument("--resume", action="store_true", help="continue from the state saved in the output folder")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: fastest on a busy 2-core machine)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to train and evaluate "
                   "(default cpu; the weights are saved as float32 on the CPU either way)")
    p.add_argument("--eval-n", type=int, default=400, help="held-out examples per evaluation")
    p.add_argument("--no-card", action="store_true", help="do not write README.md")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    """Train the model `args.model` names (a text recipe or lecture-vit), writing its card unless --no-card."""
    if args.model == train_vit.NAME:
        return train_vit.run(args)
    torch.set_num_threads(max(1, args.threads))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("attnlab train: --device cuda, but torch sees no CUDA GPU here", file=sys.stderr)
        return 2
    recipe = RECIPES[args.model]
    names = ("steps", "batch", "lr", "seed", "warmup", "init", "questions", "mask_share", "hint", "hint_steps",
             "attn_only", "weight_decay", "eval_every", "one_hop")
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
                "hint_tasks": list(recipe.hint_tasks), "attn_only": recipe.attn_only, "one_hop": recipe.one_hop,
                "weight_decay": recipe.weight_decay, "device": args.device,
                **({"gpu": torch.cuda.get_device_name()} if args.device == "cuda" else {})}

    state = state_dir(out) / "state.json"
    curve = json.loads(state.read_text())["curve"] if args.resume and state.is_file() else []

    def on_eval(step, model, seconds):
        save(model, recipe.cfg, out, extra={"training": training(step, seconds)})
        lm = load_attnlab_folder(out, args.model, str(out)).to(args.device)
        metrics = evaluate(lm, args.eval_n, seed=EVAL_SEED, detail=True)
        point = curve_point(metrics)
        log(f"eval @ {step} ({seconds:.0f}s): " + json.dumps(point))
        curve.append({"step": step, "seconds": round(seconds, 1), **point})
        (out / "curve.json").write_text(json.dumps(curve) + "\n")
        if not args.no_card:
            write_card(out, args.model, recipe.cfg, training(step, seconds), metrics, eval_n=args.eval_n, curve=curve)
        return point

    res = train(recipe, progress=not args.quiet, on_eval=on_eval, log=log, out=out, save_every=args.save_every,
                resume=args.resume, device=args.device)
    log(f"done: {res.steps} steps in {res.seconds:.0f}s -> {out}")
    if not args.no_card:
        finalize(out, args.model)
        log(f"model card: {out / 'README.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlab.lecture.train_command", description="train a bundled lecture model")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
