"""The worked examples of the Logit lens and Activation patching pages — a clean and a corrupted prompt of equal
token length, the answer pair — and the notes written from what was measured on them (attnlab lens / patch)."""

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
    lens_note: str
    patch_note: str


RETRIEVAL = Example(
    "retrieval", "Retrieval story (lecture-decoder)", "lecture-decoder",
    "fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . hildo has a "
    "turtle . what pet does garo have ?",
    "fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . hildo has a "
    "turtle . what pet does hildo have ?",
    "rabbit", "turtle",
    lens_note=(
        "Measured on this story: at the last position ('?') the embeddings alone predict '?' (p(rabbit) 0.0000, "
        "rank 148); after layer 0 the stream already reads as *a pet* (hawk 0.25, goat 0.18, rabbit 0.15); after "
        "layers 1 and 2 it stays vague (p(rabbit) 0.03); layer 3, the last, decides: p(rabbit) 0.999. Direct "
        "attribution of rabbit − turtle (11.47): layer 3's heads 0, 3, 2 (+3.40, +2.79, +2.17) and its MLP (+3.38) "
        "write it; layer 1 head 0 writes −1.08 directly, yet patching shows it is the head that *moves* the name "
        "to '?' — a head can matter without writing the answer itself."),
    patch_note=(
        "Measured (SDPA, 4 layers × 34 positions, 136 + 16 + 544 runs in about 6 s): logit(rabbit) − logit(turtle) is "
        "+11.47 on the clean story and −11.88 with the question's name swapped. The residual stream carries the "
        "difference at the question's name ('garo', position 31) entering layers 0 and 1 (100 %), then at the last "
        "position entering layers 2 and 3 (100 %): between layer 1 and layer 2 the name moves to '?'. Heads: "
        "layer 0 head 3 at 'garo' restores 96 % (it reads the name in place: position 31 only), layer 1 head 0 at "
        "'?' restores 100 % (the mover), layer 3 heads 0, 3, 2, 1 restore 52, 31, 24, 12 % at '?' (they fetch the "
        "pet, and the direct attribution shows them writing it). The attention maps show layer 1 head 0 looking "
        "at the name; patching shows the answer actually depends on it."),
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
