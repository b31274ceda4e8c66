"""Lecture-ready inputs (sample_texts/lecture.json) for the three bundled models, and their check.

Token indices in a sample count [BOS] as 0, as the shared tokenizer encodes the text. query_index is
the row whose output is the answer (the decoder: the last token; the encoder: the [MASK]);
source_index is the token the answer comes from; translation samples give `alignment` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from attnlab.data import data_folder

from .corpus import MODELS
from .tasks_base import MASK, MAX_LEN
from .tasks_language import solve_agreement, translate
from .tasks_retrieval import solve_retrieval
from .tasks_sequences import solve_brackets, solve_induction
from .tasks_story import solve_story

SAMPLES_PATH = data_folder("sample_texts") / "lecture.json"


@dataclass(frozen=True)
class Sample:
    id: str
    model: str  # "lecture-decoder", "lecture-encoder", "lecture-encdec"
    task: str
    title: str
    text: str  # the decoder's / encoder's input; for translation the target sentence
    note: str  # one line: what it shows
    answer: str | None = None
    query_index: int | None = None
    source_index: int | None = None
    src_text: str | None = None  # translation: the source sentence (the encoder's input)
    alignment: tuple[tuple[int, int], ...] = ()  # translation: (target index, source index) per target word

    def get(self, key: str, default=None):
        """Dict-style access (`sample.get("src_text")`), for callers that treat samples as records."""
        return getattr(self, key, default)


def _model_name(model: str) -> str:
    return model if model.startswith("lecture-") else f"lecture-{model}"


def load_samples(model: str | None = None, task: str | None = None, path: str | Path = SAMPLES_PATH) -> list[Sample]:
    """All samples, or those of one model ("lecture-decoder" or just "decoder") and/or one task."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))["samples"]
    out = [Sample(**{**r, "alignment": tuple(tuple(p) for p in r.get("alignment", ()))}) for r in raw]
    if model is not None:
        out = [s for s in out if s.model == _model_name(model)]
    if task is not None:
        out = [s for s in out if s.task == task]
    return out


def _check(s: Sample, tokenizer) -> str | None:
    """The first problem with one sample, or None."""
    from .tokenizer import unknown_words

    kind = s.model.removeprefix("lecture-")
    if kind not in MODELS or s.task not in (*MODELS[kind][1], *(("story",) if kind == "decoder" else ())):
        return f"model {s.model!r} is not trained on task {s.task!r}"
    for what, text in (("text", s.text), ("src_text", s.src_text)):
        if text is not None and unknown_words(text, tokenizer):
            return f"{what} has unknown words {unknown_words(text, tokenizer)}"
    tokens = tokenizer.encode(s.text).tokens
    if len(tokens) > MAX_LEN:
        return f"{len(tokens)} tokens; the lecture models take {MAX_LEN}"
    if s.task == "translation":
        want_words, want_align = translate(s.src_text.split())
        if s.text.split() != want_words:
            return f"text should be the translation {' '.join(want_words)!r}"
        if list(s.alignment) != [(j + 1, a + 1) for j, a in enumerate(want_align)]:
            return "alignment does not match the translation"
        return None
    if not (0 < s.query_index < len(tokens) and 0 < s.source_index < len(tokens)):
        return "query_index or source_index out of range"
    if kind == "decoder":
        if s.query_index != len(tokens) - 1 or MASK in tokens:
            return "a decoder sample ends at its query token and has no [MASK]"
        position = len(tokens)  # where the answer would go
    else:
        if tokens.count(MASK) != 1 or tokens[s.query_index] != MASK:
            return "an encoder sample has exactly one [MASK], at query_index"
        position = s.query_index
    if s.task == "retrieval":
        got = solve_retrieval(tokens)
    elif s.task == "story":
        got = solve_story(tokens)
    elif s.task == "agreement":
        got = solve_agreement(tokens, position)
    elif s.task == "brackets":
        got = solve_brackets(tokens, position)
    elif kind == "decoder":
        got = solve_induction(tokens, position)
    else:  # masked induction: the hidden word occurs once elsewhere, with a neighbour in common
        q, src = s.query_index, s.source_index
        got = (tokens[src], src)
        same_left = tokens[q - 1] == tokens[src - 1]
        same_right = q + 1 < len(tokens) and src + 1 < len(tokens) and tokens[q + 1] == tokens[src + 1]
        if tokens.count(got[0]) != 1 or not (same_left or same_right):
            return "the hidden word must occur once elsewhere, after or before the same word as the [MASK]"
    if got != (s.answer, s.source_index):
        return f"ground truth is answer {got[0]!r} at {got[1]}, not {s.answer!r} at {s.source_index}"
    return None


def validate_samples(samples: list[Sample] | None = None, tokenizer=None) -> list[str]:
    """One line per sample with a problem ([UNK] words, wrong indices, wrong ground truth); empty if all fine."""
    from .tokenizer import build_tokenizer

    tokenizer = tokenizer or build_tokenizer()
    problems = []
    for s in load_samples() if samples is None else samples:
        try:
            p = _check(s, tokenizer)
        except (ValueError, KeyError, IndexError, StopIteration) as e:
            p = f"cannot read it: {e}"
        if p:
            problems.append(f"{s.id}: {p}")
    return problems
