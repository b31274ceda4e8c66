"""The worked examples of the Logit lens and Activation patching pages — a clean and a corrupted prompt of equal
token length, the answer pair — and, for SmolLM2 (optional, measured once with attnlab lens / patch), the notes
written from that measurement; lecture-decoder's notes are written from the page's own (app/interp_notes.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    id: str
    title: str
    model: str
    clean: str
    corrupt: str
    answer: str
    wrong: str
    lens_note: str  # "" for an example on a bundled model: the note is written from the page's measurement
    patch_note: str


RETRIEVAL = Example(
    "retrieval", "Retrieval story (lecture-decoder)", "lecture-decoder",
    "fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . hildo has a "
    "turtle . what pet does garo have ?",
    "fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . hildo has a "
    "turtle . what pet does hildo have ?",
    "rabbit", "turtle",
    lens_note="", patch_note="",  # written from the measurement on the page: app/interp_notes.py
)

IOI = Example(
    "ioi", "Indirect object, names swapped (SmolLM2-135M)", "smollm2",
    "When Mary and John went to the store, John gave a drink to",
    "When John and Mary went to the store, Mary gave a drink to",
    "Mary", "John",
    lens_note=(
        "Measured on SmolLM2-135M-Instruct (Q4_1 weights dequantized): the answer ' Mary' has probability below "
        "0.001 after every layer but the last (0.923 at the output). Its rank tells more: about 1,000 after layers "
        "0–22, 147 right after layer 23 (the layer whose head 3 moves the name, see Activation patching), 19 after "
        "layer 28, 0 after layer 29. Through the final norm and unembedding the middle layers' stream reads as "
        "' the' or a space: the logit lens is known to be blurry on the middle layers of small modern models (a "
        "learned per-layer translator, the tuned lens, sharpens it). Direct attribution of logit(Mary) − "
        "logit(John) = 6.12: layer 23 head 3 writes +2.86 and layer 29 head 1 +1.73; layer 24 head 4 (−1.07) and "
        "layer 29 head 0 (−1.01) push back."),
    patch_note=(
        "Measured on SmolLM2-135M-Instruct (30 layers × 14 tokens: 420 + 270 + 126 runs): logit(Mary) − logit(John) "
        "is +6.12 clean and −6.47 with the names swapped. The residual stream holds the difference at the names — "
        "' Mary' (position 1, 65–77 %) and the second ' John' (the subject, position 9, 86–88 % up to layer 16, "
        "55 % up to layer 22) — and from layer 23 on at the last position (82–94 %): layer 23 moves it. Heads: "
        "layer 23 head 3 restores 58 % (and its output at the last position alone 55 %), layer 29 head 1 27 %, "
        "layer 16 head 0 14 %, layer 23 head 0 12 %, while layer 29 head 0 (−19 %) and layer 24 head 4 (−16 %) "
        "work against the answer — the name movers and negative name movers of Wang et al. (2023) on GPT-2, "
        "found again in a 135 M Llama. The same heads lead the direct attribution (+2.86, +1.73, −1.07, −1.01)."),
)

EXAMPLES = (RETRIEVAL, IOI)


def matching(model: str, text: str) -> Example | None:
    """The worked example whose model (its name, or a folder named after it) and clean prompt these are."""
    return next((e for e in EXAMPLES if e.model in model.lower() and e.clean == text), None)
