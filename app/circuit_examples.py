"""The worked examples of the Circuit page — a clean and a corrupted prompt of equal token length, the answer
pair — and what was measured on them (attnlab circuit)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.app.interp_examples import IOI


@dataclass(frozen=True)
class CircuitExample:
    id: str
    title: str
    model: str
    clean: str
    corrupt: str
    answer: str
    wrong: str
    note: str


_STORY = ("fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . hildo has "
          "a turtle . what pet does garo have ?")

RETRIEVAL = CircuitExample(
    "retrieval", "Retrieval story, the fact changed (lecture-decoder)", "lecture-decoder",
    _STORY, _STORY.replace("garo owns a rabbit", "garo owns a hawk"), "rabbit", "hawk",
    note="")

SMOLLM2_IOI = CircuitExample("ioi", "Indirect object, names swapped (SmolLM2-135M)", "smollm2", IOI.clean, IOI.corrupt,
                             IOI.answer, IOI.wrong, note="")

EXAMPLES = (RETRIEVAL, SMOLLM2_IOI)
