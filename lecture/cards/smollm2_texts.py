"""The lecture on real English: five texts measured on smollm2 (SmolLM2-135M-Instruct), and its head types.

Each `Spec` names a text, the row a lecturer asks about (query), the token the answer should come from
(source) and the tempting wrong tokens (others). `measure_spec` runs the model once (eager) and reports, for
that row, the head that puts the most weight on the source, what that head gives the others, the mean over
all heads, and the model's own top predictions. The presets' notes and the model card are written from these
numbers (lecture/cards/smollm2.py), never typed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from attnlab.analysis.probes.head_table import head_table

SINK_TEXT = "The cat sat on the mat because the mat was warm."
HEADS_TEXT = ("The cat sat on the mat because the mat was warm. The dog ran in the park and the cat watched "
              "the dog.")


@dataclass(frozen=True)
class Spec:
    id: str
    title: str
    text: str
    source: str  # token label the answer comes from
    query: str | None = None  # token label of the query row (None: the last token)
    others: tuple[str, ...] = ()  # tempting wrong sources
    answer: str | None = None  # the right next token, if the text asks for one
    occurrence: int = 0  # which occurrence of `source` (0: first)


def induction_text(tokenizer, n: int = 12, shown: int = 8, seed: int = 0) -> tuple[str, str, str]:
    """(text, the query's token, the expected next token): `n` random word tokens, then the first `shown` again.

    Words are single vocabulary tokens "Ġ" + 4–8 lowercase letters, so the text re-tokenises to them."""
    vocab = tokenizer.tok.get_vocab()
    words = sorted(t for t in vocab if t.startswith("Ġ") and t[1:].isascii() and t[1:].isalpha()
                   and t[1:].islower() and 4 <= len(t) - 1 <= 8)
    pick = [w[1:] for w in np.random.default_rng(seed).choice(words, n, replace=False)]
    seq = [" " + w for w in pick]
    return "Words:" + "".join(seq) + "".join(seq[:shown]), seq[shown - 1], seq[shown]


def specs(tokenizer) -> list[Spec]:
    ind, ind_query, ind_next = induction_text(tokenizer)
    return [
        Spec("smollm2-coref", "What does 'it' refer to?", "The animal didn't cross the street because it was too tired.",
             " animal", query=" it", others=(" street",)),
        Spec("smollm2-ioi", "Indirect object: Mary or John?",
             "When Mary and John went to the store, John gave a drink to", " Mary", others=(" John",), answer=" Mary"),
        Spec("smollm2-induction", "Induction on repeated random words", ind, ind_next, answer=ind_next,
             occurrence=0),
        Spec("smollm2-sinks", "Attention sinks: the first token", SINK_TEXT, "The"),
        Spec("smollm2-alex", "How old is Alex's best friend? (answered wrongly)",
             "Alex has a friend called John. He is 46. Alex also has two cats. They are 12. How old is the best "
             "friend of Alex? The age of his best friend is ", "4", others=("1",), answer="4"),
    ]


@dataclass
class Measured:
    spec: Spec
    tokens: list[str]
    query_index: int
    source_index: int
    best_head: tuple[int, int]
    best_weight: float
    others: dict[str, float]  # at the best head: weight on each other token (all its occurrences summed)
    mean_weight: float  # over every head
    top: list[tuple[str, float]]  # the model's top predictions at the query row
    probs: dict[str, float] = field(default_factory=dict)  # next-token probability of the source and others
    greedy: list[str] = field(default_factory=list)
    layer_sink: list[float] = field(default_factory=list)  # per layer: mean weight on token 0 (rows ≥ 1)


def measure_spec(lm, spec: Spec) -> Measured:
    run = lm.run(spec.text, backend="eager")
    toks = run.tokens
    pats = run.matrices("self")  # float32 [L, H, T, T]
    q = len(toks) - 1 if spec.query is None else toks.index(spec.query)
    s = [i for i, t in enumerate(toks) if t == spec.source][spec.occurrence]
    w = pats[:, :, q, s]  # [L, H]
    layer, head = np.unravel_index(int(np.argmax(w)), w.shape)
    others = {o: float(sum(pats[layer, head, q, i] for i, t in enumerate(toks[:q + 1]) if t == o)) for o in spec.others}
    top = [(t, float(p)) for t, p in zip(run.top_tokens[q], run.top_probs[q])]
    logits = lm.forward(lm.encode(spec.text)).logits[0, q]  # [V]
    p = logits.float().softmax(-1)
    ids = {t: run.ids[i] for i, t in enumerate(toks) if t in (spec.source, *spec.others)}
    probs = {t: float(p[i]) for t, i in ids.items()}
    greedy = lm.generate(spec.text, 3)[1][-3:] if spec.answer is not None else []
    sink = pats[:, :, 1:, 0].mean(axis=(1, 2)).tolist()  # [L]: rows after the first, every head
    return Measured(spec, toks, q, s, (int(layer), int(head)), float(w[layer, head]), others, float(w.mean()), top,
                    probs, greedy, [float(x) for x in sink])


def head_types(lm, text: str = HEADS_TEXT, top: int = 4):
    """(head statistics table, repeat period, {type: [(layer, head, score)] best first}, label counts)."""
    df, period = head_table(lm, lm.encode(text))
    best = {}
    for label, col in (("previous-token", "prev_token"), ("induction", "induction"),
                       ("duplicate-token", "duplicate_token"), ("sink", "sink_mass")):
        rows = df.nlargest(top, col)
        best[label] = [(int(r.layer), int(r.head), float(getattr(r, col))) for r in rows.itertuples()]
    return df, period, best, df["label"].value_counts().to_dict()
