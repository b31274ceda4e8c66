"""The worked examples of the Circuit page — a clean and a corrupted prompt of equal token length, the answer
pair — and what was measured on them (attnlab circuit)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.app.interp_examples import IOI
from attnlab.app.interp_examples import RETRIEVAL as PATCHING_RETRIEVAL


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


_STORY = PATCHING_RETRIEVAL.clean  # the Activation patching page's retrieval story

RETRIEVAL = CircuitExample(
    "retrieval", "Retrieval story, the fact changed (lecture-decoder)", "lecture-decoder",
    _STORY, _STORY.replace("garo owns a rabbit", "garo owns a hawk"), "rabbit", "hawk",
    note=(
        "Measured (EAP-IG, 10 gradients, 0.4 s): logit(rabbit) − logit(hawk) is +13.46 on the story and −12.93 with "
        "garo's pet changed to a hawk. Of the 479 edges, the top 23 (5 %) keep 96.5 % of the difference (EAP: the "
        "same); 12 edges keep 56 %, 41 edges all of it. The circuit reads the pet where the fact states it (layer 0 "
        "heads 3 and 1 through their values, then layer 0's MLP) and carries it to '?' through the values of layer "
        "3's heads 0–3, which write the answer into the logits. Heads 3.1 (the card's retrieval head) and 3.2 (its "
        "one-hop head) are in it; by their outgoing edges 0.3, 3.0, 3.1 and 0.1 matter most (63, 36, 28 and 23 % "
        "of the difference, each alone, linearly estimated)."))

SMOLLM2_IOI = CircuitExample(
    "ioi", "Indirect object, names swapped (SmolLM2-135M)", "smollm2", IOI.clean, IOI.corrupt, IOI.answer, IOI.wrong,
    note=(
        "Measured on SmolLM2-135M-Instruct (EAP-IG, 10 gradients, 3 s for the scores, 70,651 edges): logit(Mary) − "
        "logit(John) is +6.12 clean and −6.47 with the names swapped. The top 5 % (3,532 edges) keep 89 % of the "
        "difference, the top 812 already 94 % (EAP: 86 % at 5 %). Heads by their outgoing edges: 23.3 +47 %, 29.1 "
        "+24 %, 23.0 +18 %, 29.0 −18 %, 24.4 −15 % — the name movers and negative name movers that exact activation "
        "patching finds (+58, +27, +12, −19, −16 %). Over all 270 heads, though, EAP-IG's path over the embeddings "
        "ranks them as exact patching of each head's output does with Spearman 0.57 only (the corrupted output into "
        "the clean run; 0.64 the other way): it spreads the whole difference rather than estimating one head's patch. "
        "EAP-IG over activations (each layer's heads on their own path, 20 s) ranks them with 0.96, and 0.94, 0.89, "
        "0.98 on three other name pairs; its 5 % circuit keeps less (71 %)."))

EXAMPLES = (RETRIEVAL, SMOLLM2_IOI)
