"""Presets: the sample texts a page offers for a model (the lecture's samples for the bundled models, a few
generic texts otherwise), and the query and source tokens a preset points at."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from attnlab.model.lecture.samples import load_samples

from attnlab.data import data_folder

log = logging.getLogger("attnlab.app")


@dataclass(frozen=True)
class Preset:
    id: str
    title: str
    text: str
    note: str
    src_text: str | None = None
    answer: str | None = None
    query_index: int | None = None
    source_index: int | None = None
    alignment: tuple = ()  # (target index, source index) pairs of a translation sample
    query_word: str | None = None  # the query named by its token, for a text whose indices differ per tokenizer
    source_word: str | None = None  # likewise the source token


GENERIC = [
    Preset("cat-mat", "The cat and the mat", "The cat sat on the mat because the mat was warm.",
           "a plain sentence: look for heads that attend to the previous token or to the first token"),
    Preset("repeat", "A repeated phrase", "red fox jumps. red fox jumps. red fox",
           "the second copy can look back at the first one (induction) — trained models only"),
    Preset("markup", "Markup stays text", "<b>bold</b> & <i>tags</i> are just tokens",
           "tags and ampersands are shown as text, never rendered"),
]
GENERIC_ENCDEC = [
    Preset("copy-src", "Copy a sentence", "the cat", "the decoder's cross-attention reads the source sentence",
           src_text="the cat sat on the mat ."),
]
GENERIC_ENCODER = [
    Preset("minilm-it", "What does 'it' refer to?", "The animal didn't cross the street because it was too tired.",
           "look for a head where 'it' attends to 'animal'", query_word="it", source_word="animal"),
    *GENERIC[::2],
]


SAMPLES_OF = {"lecture-moe": "lecture-decoder"}  # a bundled model trained on another's tasks shows its samples ...
TRAINED_ON = {"lecture-moe": ("retrieval", "induction", "agreement")}  # ... of the tasks it was trained on
MEASURED = {"smollm2": data_folder("sample_texts") / "smollm2.json"}  # notes measured


def measured_presets(path: Path) -> list[Preset]:
    """Presets of a real model whose notes were written from measurements (lecture/cards/smollm2.py)."""
    raw = json.loads(path.read_text(encoding="utf-8"))["samples"]
    return [Preset(r["id"], r["title"], r["text"], r["note"], answer=r.get("answer"), query_index=r.get("query_index"),
                   source_index=r.get("source_index")) for r in raw]


def presets(model_name: str) -> list[Preset]:
    """Lecture samples for the bundled models (sample_texts/lecture.json), generic texts otherwise."""
    if model_name.startswith("lecture-"):
        try:
            owner = SAMPLES_OF.get(model_name, model_name)
            got = [Preset(s.id, s.title, s.text, s.note if owner == model_name else borrowed_note(s.note, owner, model_name),
                          s.src_text, s.answer, s.query_index, s.source_index, tuple(s.alignment))
                   for s in load_samples(owner) if s.task in TRAINED_ON.get(model_name, (s.task,))]
            if got:
                return got
        except Exception as e:  # noqa: BLE001 — samples are optional; fall back to generic texts
            log.warning("no lecture samples: %s", e)
    if model_name in MEASURED:
        try:
            return measured_presets(MEASURED[model_name])
        except Exception as e:  # noqa: BLE001 — optional, as above
            log.warning("no presets for %s: %s", model_name, e)
    if model_name.endswith("encdec"):
        return GENERIC_ENCDEC
    if model_name == "minilm" or model_name.endswith("encoder"):
        return GENERIC_ENCODER
    return GENERIC


def borrowed_note(note: str, owner: str, model_name: str) -> str:
    """A sample's note shown for another model: its numbers (heads, shares) are the owner's, said so."""
    return (f"{note} (A sample of {owner}'s tasks: the heads and shares named here are {owner}'s; {model_name} was "
            f"upcycled from it and attends and answers in its own way — see its card.)")


def default_query(cap, preset: Preset | None) -> int:
    """The row a lecturer asks about: the preset's query token, else the [MASK] or the last token."""
    t = len(cap.tokens)
    if preset is not None and preset.query_index is not None and 0 <= preset.query_index < t:
        return int(preset.query_index)
    if preset is not None and (i := word_index(cap.tokens, preset.query_word)) is not None:
        return i
    if "[MASK]" in cap.tokens:
        return cap.tokens.index("[MASK]")
    return t - 1


def source_index(cap, preset: Preset | None) -> int | None:
    """The preset's ground-truth source token (what its query token should look at), if it names one."""
    if preset is not None and preset.source_index is not None and 0 <= preset.source_index < len(cap.tokens):
        return int(preset.source_index)
    return None if preset is None else word_index(cap.tokens, preset.source_word)


def word_index(tokens, word: str | None) -> int | None:
    """The first token that is `word` (case and surrounding spaces aside), or None (no such token: this
    tokenizer splits the word)."""
    if word is None:
        return None
    return next((i for i, t in enumerate(tokens) if str(t).strip().lower() == word.lower()), None)


NOTE_HEAD = re.compile(r"\bhead (\d+)\.(\d+)\b")  # "head 2.1" in a note: layer 2, head 1


def note_head(preset: Preset | None) -> tuple[int, int] | None:
    """The (layer, head) a preset's note points at ("… head 2.1 does this …"), if it names one."""
    m = NOTE_HEAD.search(preset.note) if preset is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else None
