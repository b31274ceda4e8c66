"""Held-out accuracy of a bundled lecture model, per task, on fresh examples (split="eval").

causal   argmax of the logits at p − 1 equals tokens[p] for each answer position p (induction: one
         score per answer token; every other task has one answer per example);
masked   input `masked_tokens`, argmax at each [MASK]ed answer position;
seq2seq  greedy decoding from [BOS] until [EOS] or the context ends; exact match of tgt_tokens[1:]
         ([EOS] included).

A next-token model whose vocabulary holds the story's words and whose context holds its longest story is also
scored on n // 2 held-out stories of the first lecture ("story", tasks_story.py), scored like retrieval.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import islice

import torch
from attnlab.model.lecture.corpus import CORPUS, model_stream, stream
from attnlab.model.lecture.tasks_story import STORY_LEN
from attnlab.model.lecture.tasks_story import WORDS as STORY_WORDS

BATCH = 100


def kind_of(lm) -> str:
    """The corpus mixture a loaded model is evaluated on (decoder, encoder or encdec): the one of its objective."""
    return CORPUS[lm.objective]


def _vocab(lm) -> dict[str, int]:
    tok = getattr(lm.tokenizer, "tok", lm.tokenizer)
    return tok.get_vocab(with_added_tokens=True)


def _pad(rows: list[list[int]], pad: int, device: torch.device | str = "cpu") -> torch.Tensor:
    T = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (T - len(r)) for r in rows], dtype=torch.long, device=device)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def _score_decoder(model, vocab, examples, pad) -> list[list[bool]]:
    x = _pad([[vocab[t] for t in ex.tokens] for ex in examples], pad, _device(model))
    pred = model(x).logits.argmax(-1)  # [B, T]; right padding never reaches a causal row
    return [[int(pred[i, p - 1]) == vocab[ex.tokens[p]] for p in ex.answer_positions] for i, ex in enumerate(examples)]


@torch.no_grad()
def _score_encoder(model, vocab, examples, pad) -> list[list[bool]]:
    x = _pad([[vocab[t] for t in ex.masked_tokens] for ex in examples], pad, _device(model))
    pred = model(x, attention_mask=x != pad).logits.argmax(-1)
    return [[int(pred[i, p]) == vocab[ex.tokens[p]] for p in ex.answer_positions] for i, ex in enumerate(examples)]


@torch.no_grad()
def greedy_translate(model, src: torch.Tensor, src_mask: torch.Tensor, bos: int, eos: int, max_len: int) -> list[list[int]]:
    """Batched greedy decoding; each row's ids after [BOS] up to and including its first [EOS]."""
    memory = model.encode(src, src_mask=src_mask)
    ys = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    while ys.shape[1] < max_len and not bool(done.all()):
        nxt = model.decode(ys, memory, src_mask=src_mask).logits[:, -1].argmax(-1)  # [B]
        nxt = nxt.masked_fill(done, eos)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos
    out = []
    for row in ys[:, 1:].tolist():
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def _score_encdec(model, vocab, examples, pad) -> list[list[bool]]:
    src = _pad([[vocab[t] for t in ex.src_tokens] for ex in examples], pad, _device(model))
    hyp = greedy_translate(model, src, src != pad, vocab["[BOS]"], vocab["[EOS]"], model.cfg.max_len)
    return [[h == [vocab[t] for t in ex.tgt_tokens[1:]]] for h, ex in zip(hyp, examples)]


SCORERS = {"causal": _score_decoder, "masked": _score_encoder, "seq2seq": _score_encdec}  # by lm.objective


def evaluate(lm, n: int = 200, seed: int = 0, *, detail: bool = False) -> dict:
    """{"tasks": {task: {"n": examples, "accuracy": float}}} on n fresh held-out examples.

    Accuracy is per answer token (only induction has several per example). detail=True adds, per
    task, "answers" (answer tokens scored), "exact" (share of examples with every answer right) and
    "kinds" (the same numbers per example kind, e.g. retrieval's one- and two-hop questions).
    """
    if n < 1:
        raise ValueError(f"n must be ≥ 1, not {n}")
    vocab = _vocab(lm)
    pad = vocab["[PAD]"]
    examples = list(islice(model_stream(kind_of(lm), seed, split="eval"), n))
    if lm.predicts_next_token and set(STORY_WORDS) <= set(vocab) and lm.cfg.max_len > STORY_LEN:
        examples += list(islice(stream("story", seed, split="eval"), max(1, n // 2)))
    model = lm.model.eval()
    hits: list[list[bool]] = []
    for i in range(0, len(examples), BATCH):
        hits += SCORERS[lm.objective](model, vocab, examples[i : i + BATCH], pad)
    groups: dict[str, list] = defaultdict(list)
    kinds: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for ex, h in zip(examples, hits):
        groups[ex.task].append(h)
        kinds[ex.task][ex.kind].append(h)

    def summary(rows):
        flat = [b for r in rows for b in r]
        out = {"n": len(rows), "accuracy": sum(flat) / len(flat)}
        if detail:
            out |= {"answers": len(flat), "exact": sum(all(r) for r in rows) / len(rows)}
        return out

    tasks = {}
    for task in sorted(groups):
        tasks[task] = summary(groups[task])
        if detail:
            tasks[task]["kinds"] = {k: summary(v) for k, v in sorted(kinds[task].items())}
    return {"tasks": tasks}
