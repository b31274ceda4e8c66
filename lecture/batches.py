"""Training batches of the lecture models: examples → padded id tensors with per-target weights, the
denser-question options, and `Bank`: a chunk of the stream tokenised once, dealt out in length-sorted batches."""

from __future__ import annotations

from random import Random

import torch
from attnlab.model.lecture.tasks_base import MASK, PAD
from attnlab.model.lecture.tasks_retrieval import ask_more, is_two_hop, owner_position
from attnlab.model.lecture.tasks_sequences import mask_more
from attnlab.model.lecture.tasks_story import ask_more_story, facts
from attnlab.model.lecture.tokenizer import build_tokenizer

# Most tokens of a story or a random sequence cannot be predicted; their loss is noise that drowns the
# answers' signal (measured: a 2-layer model learns induction in 600 steps with answer-only loss, not at
# all in 800 steps with the plain LM loss). So answers weigh 1 and every other target a little.
OTHER_WEIGHT = 0.01  # decoder: weight of a non-answer next token (keeps it a language model)
EXTRA_MASK = 0.10  # encoder: share of the other (non-source) tokens masked as well
EXTRA_WEIGHT = 0.1  # encoder: weight of such an extra masked token
IGNORE = -100


class Batcher:
    """Examples → padded id tensors for one model kind. Pure function of (examples, rng)."""

    def __init__(self, kind: str, hint_tasks: tuple = ()):
        self.kind = kind
        self.hint_tasks = hint_tasks
        vocab = build_tokenizer().get_vocab(with_added_tokens=True)
        self.vocab = vocab
        self.pad, self.mask = vocab[PAD], vocab[MASK]

    def ids(self, tokens) -> list[int]:
        return [self.vocab[t] for t in tokens]

    def __call__(self, examples, rng: Random) -> dict[str, torch.Tensor]:
        batch = getattr(self, f"_{self.kind}")(examples, rng)
        if self.hint_tasks:  # (example, row, key, task number) of every hinted row
            batch["hint"] = torch.tensor([h for i, ex in enumerate(examples) for h in self._hints(i, ex)],
                                         dtype=torch.long).reshape(-1, 4)  # [N, 4]
        return batch

    def _hints(self, i: int, ex):
        """A task's answers: query row → source; and, as their own hint tasks, the first half of each
        lookup: "retrieval-owner", each retrieval source's row → the name the fact is about (when that
        name comes first); "induction-prev", each induction source's row (and an encoder's [MASK] row)
        → the token before it; "retrieval-asker", each answer's query row → the name its question asks
        about; "retrieval-bridge" / "story-bridge", each two-hop answer's query row → the bridge (the best
        friend's name where the story states it); "story-owner", each best friend's name in "P has a best friend
        named N" → P; "story-asker", each "… friend of X ?" answer's query row → X. With "retrieval-2hop" among them, two-hop answers are a task of their own (their own head)."""
        shift = 1 if self.kind == "decoder" else 0
        number = self.hint_tasks.index
        if ex.task in self.hint_tasks:
            for p, s in zip(ex.answer_positions, ex.source_positions):
                two = ex.task == "retrieval" and "retrieval-2hop" in self.hint_tasks and is_two_hop(ex.tokens, p)
                yield i, p - shift, s, number("retrieval-2hop" if two else ex.task)
        if ex.task in ("retrieval", "story") and f"{ex.task}-bridge" in self.hint_tasks:
            bridges = iter(ex.support_positions)  # one per two-hop answer, in order
            for p in ex.answer_positions:
                if (ex.task == "story" and ex.tokens[p - 6] == "age"  # "the age of his best friend is"
                        or ex.task == "retrieval" and is_two_hop(ex.tokens, p)):
                    yield i, p - shift, next(bridges), number(f"{ex.task}-bridge")
        if ex.task == "retrieval" and "retrieval-owner" in self.hint_tasks:
            for s in ex.source_positions:
                if (o := owner_position(ex.tokens, s)) is not None:
                    yield i, s, o, number("retrieval-owner")
        if ex.task == "retrieval" and "retrieval-asker" in self.hint_tasks:
            for p in ex.answer_positions:
                yield i, p - shift, owner_position(ex.tokens, p - shift), number("retrieval-asker")
        if ex.task == "story" and "story-owner" in self.hint_tasks:
            for _, n in facts(list(ex.tokens))[0].values():  # "P has a best friend named N": N at P + 6
                yield i, n, n - 6, number("story-owner")
        if ex.task == "story" and "story-asker" in self.hint_tasks:
            for p in ex.answer_positions:
                q = max(j for j in range(p) if ex.tokens[j] == "?")
                if ex.tokens[q - 2] == "of":  # "… best friend of X ?"
                    yield i, p - shift, q - 1, number("story-asker")
        if ex.task == "induction" and "induction-prev" in self.hint_tasks:
            rows = set(ex.source_positions) | (set(ex.answer_positions) if self.kind == "encoder" else set())
            yield from ((i, r, r - 1, number("induction-prev")) for r in sorted(rows) if r > 1)

    def _pad(self, rows: list[list[int]], value: int) -> torch.Tensor:
        T = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (T - len(r)) for r in rows], dtype=torch.long)

    def _decoder(self, examples, rng):
        inputs, targets, weights = [], [], []
        for ex in examples:
            ids = self.ids(ex.tokens)
            w = [OTHER_WEIGHT] * len(ids)
            for p in ex.answer_positions:
                w[p] = 1.0
            inputs.append(ids[:-1])
            targets.append(ids[1:])
            weights.append(w[1:])
        x = self._pad(inputs, self.pad)
        y = self._pad(targets, IGNORE)
        T = x.shape[1]
        wt = torch.tensor([w + [0.0] * (T - len(w)) for w in weights])
        return {"x": x, "y": y, "w": wt}

    def _encoder(self, examples, rng):
        inputs, targets, weights = [], [], []
        for ex in examples:
            ids = self.ids(ex.tokens)
            x, y, w = list(ids), [IGNORE] * len(ids), [0.0] * len(ids)
            for p in ex.answer_positions:
                x[p], y[p], w[p] = self.mask, ids[p], 1.0
            if ex.task != "brackets":
                keep = set(ex.source_positions) | set(ex.support_positions) | set(ex.answer_positions) | {0}
                for p in range(1, len(ids)):
                    if p not in keep and rng.random() < EXTRA_MASK:
                        x[p], y[p], w[p] = self.mask, ids[p], EXTRA_WEIGHT
            inputs.append(x)
            targets.append(y)
            weights.append(w)
        x = self._pad(inputs, self.pad)
        T = x.shape[1]
        return {"x": x, "y": self._pad(targets, IGNORE), "w": torch.tensor([w + [0.0] * (T - len(w)) for w in weights]),
                "attention_mask": x != self.pad}

    def _encdec(self, examples, rng):
        src = self._pad([self.ids(ex.src_tokens) for ex in examples], self.pad)
        tgt = [self.ids(ex.tgt_tokens) for ex in examples]
        x = self._pad([t[:-1] for t in tgt], self.pad)
        y = self._pad([t[1:] for t in tgt], IGNORE)
        return {"src": src, "src_mask": src != self.pad, "x": x, "y": y, "w": (y != IGNORE).float()}


def denser(data, recipe, rng: Random, one_hop: bool = False):
    """Training examples with more answers per sequence: retrieval stories with up to `recipe.questions`
    questions (`ask_more`), masked induction and brackets with `recipe.mask_share` hidden (`mask_more`).

    Options for experiments, off in the shipped recipes: a causal model's first answer sees exactly the
    held-out format; an encoder sees 0..questions−1 extra questions (all answers masked), so
    single-question stories stay in its mix. Measured (model cards' notes): neither these nor the
    attention hint lifted held-out retrieval above chance within 1,200 steps.

    one_hop: drop two-hop retrieval stories and ask one-hop questions only (a curriculum's first stage; the
    lecture's story then asks its bridge, "who is the best friend of X ?", and the ages behind pronouns)."""
    for ex in data:
        if one_hop and (ex.task == "retrieval" and ex.kind.startswith("friend_") or ex.task == "story"
                        and ex.kind == "best"):
            continue
        if ex.task == "story" and recipe.questions > 1:
            ex = ask_more_story(ex, rng, recipe.questions - 1, recipe.cfg.max_len - 1, one_hop)
        elif ex.task == "retrieval" and recipe.questions > 1:
            n = recipe.questions - 1 if recipe.corpus == "decoder" else rng.randint(0, recipe.questions - 1)
            ex = ask_more(ex, rng, n, recipe.cfg.max_len - 1, one_hop)
        elif recipe.mask_share > 0:
            ex = mask_more(ex, rng, recipe.mask_share)
        yield ex


class Bank:
    """`examples` tokenised once (`batcher` on the whole chunk) into padded [N, T] tensors; a training
    batch is a set of rows, cut to the longest one. No per-token Python between steps.

    `order(batch, gen)`: every row once, in batches of similar length (pools of four batches sorted by
    length, the batches then shuffled), drawn with the torch generator `gen`."""

    def __init__(self, examples, batcher: Batcher, rng: Random):
        self.t = batcher(examples, rng)
        self.hint = self.t.pop("hint", None)
        self.kind = batcher.kind
        x = self.t["x"]
        self.len_x = (x != batcher.pad).sum(1)  # [N] real tokens per row (padding only on the right)
        self.len_src = (self.t["src"] != batcher.pad).sum(1) if self.kind == "encdec" else None

    def __len__(self) -> int:
        return len(self.len_x)

    def order(self, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
        perm = torch.randperm(len(self), generator=gen)
        key = self.len_x + (self.len_src if self.len_src is not None else 0)
        groups = []
        for pool in perm.split(4 * batch):
            pool = pool[torch.argsort(key[pool], stable=True)]
            groups += [g for g in pool.split(batch) if len(g) == batch]
        return [groups[i] for i in torch.randperm(len(groups), generator=gen).tolist()]

    def __call__(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        T = int(self.len_x[rows].max())
        out = {k: v[rows, :T] for k, v in self.t.items() if k not in ("src", "src_mask")}
        if self.len_src is not None:
            S = int(self.len_src[rows].max())
            out["src"], out["src_mask"] = self.t["src"][rows, :S], self.t["src_mask"][rows, :S]
        if self.hint is not None:  # example numbers renumbered to the batch's rows
            where = torch.full((len(self),), -1, dtype=torch.long)
            where[rows] = torch.arange(len(rows))
            h = self.hint[where[self.hint[:, 0]] >= 0]
            out["hint"] = torch.cat([where[h[:, :1]], h[:, 1:]], 1)  # [N, 4]
        return out
