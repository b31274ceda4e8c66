"""The roles a lecture model's heads are named for: per (objective, task) — `lm.objective`, "causal", "masked" or
"seq2seq" — the line a card writes under "What to look at" ({h}: the head, {v}: its share of attention). The cards
(attnlab.lecture.cards.heads) fill them in; circuit discovery (analysis/circuit/names.py) reads the decoder's back
out of a card."""

LOOK = {
    ("causal", "retrieval"): "Retrieval: on a story (e.g. `how old is the best friend of veno ?`), the row of `?` in "
                             "head {h} lands on the answer's fact ({v:.0%} of its attention on average).",
    ("causal", "retrieval one-hop"): "One-hop questions alone (`how old is X ?`, `what pet does X have ?`, `who is "
                                     "the best friend of X ?`): head {h} puts {v:.0%} of the answer row's attention "
                                     "on the true fact.",
    ("causal", "story"): "The first lecture's story (`alex has a friend called john . he is 46 years of age . alex "
                         "has a best friend named mary . she is 48 years young . … how old is the best friend of "
                         "alex ? the age of his best friend is`): head {h} puts {v:.0%} of the answer row's "
                         "attention on the number that answers it.",
    ("causal", "story bridge"): "The story's first hop: head {h} puts {v:.0%} of the two-hop answer row's attention "
                                "on the best friend's name (`mary` in `alex has a best friend named mary`).",
    ("causal", "induction"): "Induction: on a repeated random sequence, head {h} attends from each token of the second "
                             "copy to the token after its first occurrence ({v:.0%} on average).",
    ("causal", "previous-token"): "Previous-token head: {h} puts {v:.0%} of each row on the token just before it — "
                                  "the first half of the induction circuit.",
    ("causal", "agreement"): "Agreement: the row before the verb, head {h}, looks back to the subject noun "
                             "({v:.0%}), skipping the distractor clause.",
    ("masked", "retrieval"): "Retrieval (masked): the [MASK] row in head {h} lands on the answer's fact ({v:.0%}); "
                             "compare with the decoder on the same text.",
    ("masked", "induction"): "Copying (masked): head {h} attends from a [MASK] in the second copy to the same "
                             "token in the first copy ({v:.0%}) — with bidirectional attention no induction "
                             "circuit is needed.",
    ("masked", "agreement"): "Agreement (masked): the [MASK]ed verb's row in head {h} looks at the subject noun "
                             "({v:.0%}).",
    ("masked", "brackets"): "Brackets: the [MASK]ed closing bracket's row in head {h} attends to its opener ({v:.0%}).",
    ("seq2seq", "translation"): "Cross-attention: head {h} follows the alignment, reordering adjective–noun and moving the "
                                "verb to the end ({v:.0%} of each step's attention on the aligned source word).",
}
DECODER_LOOK = {task: t for (objective, task), t in LOOK.items() if objective == "causal"}  # lecture-decoder's lines
