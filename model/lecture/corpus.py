"""The lecture corpus: seeded generators for five tasks with known answers, and per-model mixtures.

Every example is an `Example` (tasks_base.py) whose positions index `tokens`, which start with [BOS]
exactly as the shared tokenizer encodes `example.text`. Randomness comes only from a
`random.Random` built from (stream, split, seed), never from global state, so a seed always gives
the same examples on any machine and Python version.

Train and eval never overlap: an example belongs to the eval split when a hash of its text falls in
one bucket of ten, and each split only keeps its own examples (and draws from its own stream).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from itertools import islice
from random import Random

from . import tasks_language, tasks_retrieval, tasks_sequences, tasks_story
from .tasks_base import SPECIAL_TOKENS, Example

TASKS = {
    "retrieval": tasks_retrieval.retrieval,
    "induction": tasks_sequences.induction,
    "agreement": tasks_language.agreement,
    "brackets": tasks_sequences.brackets,
    "translation": tasks_language.translation,
    "story": tasks_story.story,
}
TASK_OBJECTIVES = {  # the objectives each task can be posed in; the first is the default
    "retrieval": ("causal", "masked"),
    "induction": ("causal", "masked"),
    "agreement": ("causal", "masked"),
    "brackets": ("masked",),
    "translation": ("seq2seq",),
    "story": ("causal",),
}
MODELS = {  # bundled model -> (objective, task mixture weights)
    "decoder": ("causal", {"retrieval": 0.5, "induction": 0.25, "agreement": 0.25}),
    "encoder": ("masked", {"retrieval": 0.4, "induction": 0.2, "agreement": 0.2, "brackets": 0.2}),
    "encdec": ("seq2seq", {"translation": 1.0}),
}
CORPUS = {objective: model for model, (objective, _) in MODELS.items()}  # objective -> its bundled mixture
SPLITS = ("train", "eval")
EVAL_BUCKETS = 10  # one text in ten belongs to the eval split


def vocabulary(story: bool = True) -> list[str]:
    """Every token the generators can produce: the six specials (ids 0..5), the first corpus's words sorted
    (ids 6..185, as in the bundled checkpoints' tokenizer.json), then the story's new words sorted (ids 186..;
    `story=False`: without them)."""
    words = set(tasks_retrieval.WORDS) | set(tasks_language.WORDS) | set(tasks_sequences.WORDS)
    base = list(SPECIAL_TOKENS) + sorted(words - set(SPECIAL_TOKENS))
    return base + (sorted(set(tasks_story.WORDS) - set(base)) if story else [])


def split_of(example: Example) -> str:
    """"eval" or "train", from a hash of the example's text (source and target for translation)."""
    key = f"{example.src_text}|{example.text}".encode()
    return "eval" if int(hashlib.sha256(key).hexdigest()[:8], 16) % EVAL_BUCKETS == 0 else "train"


def _rng(stream: str, split: str, seed: int) -> Random:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    return Random(f"attnlab.lecture|{stream}|{split}|{int(seed)}")


def _draw(rng: Random, task: str, objective: str, split: str) -> Example:
    for _ in range(10_000):
        ex = TASKS[task](rng, objective)
        if split_of(ex) == split:
            return ex
    raise RuntimeError(f"could not draw a {split} example for {task}")  # never: ~1 in 10 qualifies


def stream(task: str, seed: int, *, split: str = "train", objective: str | None = None) -> Iterator[Example]:
    """Endless examples of one task (`objective` defaults to the task's first)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(TASKS)}")
    objective = objective or TASK_OBJECTIVES[task][0]
    if objective not in TASK_OBJECTIVES[task]:
        raise ValueError(f"task {task!r} is posed as {TASK_OBJECTIVES[task]}, not {objective!r}")
    rng = _rng(task, split, seed)  # same stream for either objective: identical texts where the task allows
    while True:
        yield _draw(rng, task, objective, split)


def generate(task: str, n: int, seed: int, *, split: str = "train", objective: str | None = None) -> list[Example]:
    """The first `n` examples of `stream(task, seed, ...)`."""
    return list(islice(stream(task, seed, split=split, objective=objective), n))


def model_stream(model: str, seed: int, *, split: str = "train",
                 weights: dict[str, float] | None = None, part: int = 0) -> Iterator[Example]:
    """Endless examples for one bundled model ("decoder", "encoder", "encdec"), tasks drawn by weight.
    `part` > 0: another independent stream of the same seed (training reads one part per chunk)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {sorted(MODELS)}")
    objective, default = MODELS[model]
    weights = weights or default
    for task in weights:
        if objective not in TASK_OBJECTIVES.get(task, ()):
            raise ValueError(f"task {task!r} cannot be posed as {objective!r} for the {model}")
    tasks, w = list(weights), list(weights.values())
    rng = _rng(f"mix/{model}" + (f"/{part}" if part else ""), split, seed)
    while True:
        yield _draw(rng, rng.choices(tasks, w)[0], objective, split)


def model_examples(model: str, n: int, seed: int, *, split: str = "train",
                   weights: dict[str, float] | None = None) -> list[Example]:
    return list(islice(model_stream(model, seed, split=split, weights=weights), n))


def decoder_examples(n: int, seed: int, split: str = "train") -> list[Example]:
    """Causal-LM mixture: retrieval, induction, agreement."""
    return model_examples("decoder", n, seed, split=split)


def encoder_examples(n: int, seed: int, split: str = "train") -> list[Example]:
    """Masked-LM mixture: retrieval, induction, agreement, brackets (mask the answer positions)."""
    return model_examples("encoder", n, seed, split=split)


def encdec_examples(n: int, seed: int, split: str = "train") -> list[Example]:
    """Translation pairs: src_tokens -> tgt_tokens, with alignment."""
    return model_examples("encdec", n, seed, split=split)
