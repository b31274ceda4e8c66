"""What every lecture task shares: special tokens, the length limit and the Example record.

Positions are token indices into the sequence the model sees. Every sequence starts with [BOS] at
index 0 (the shared tokenizer prepends it), so `Example.tokens == tokenizer.encode(example.text).tokens`
and index 0 is never an answer or a source.
"""

from __future__ import annotations

from dataclasses import dataclass

PAD, UNK, BOS, EOS, MASK, SEP = "[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "[SEP]"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS, MASK, SEP)  # ids 0..5 in this order

# Longest sequence a lecture model sees, [BOS] and one appended [EOS] included:
# causal/masked examples have len(tokens) <= MAX_LEN - 1; seq2seq src and tgt (with [EOS]) <= MAX_LEN.
MAX_LEN = 64

OBJECTIVES = ("causal", "masked", "seq2seq")


@dataclass(frozen=True)
class Example:
    """One generated example with its ground truth.

    tokens: the model's input, tokens[0] == "[BOS]" (for translation: the target side, tgt_tokens).
    answer_positions: indices in `tokens` of the answer tokens, i.e. what the model must predict.
      causal: tokens[p] is predicted from position p - 1 (see `query_positions`);
      masked: tokens[p] is replaced by [MASK] and predicted at p (see `masked_tokens`);
      seq2seq: tgt_tokens[p] is predicted by the decoder at p - 1 (teacher forcing).
    source_positions: for each answer, the index of the token it comes from (in `tokens`; in
      `src_tokens` for translation): the fact, the earlier copy, the subject, the opener, the aligned word.
    support_positions: other tokens a correct answer needs (retrieval's bridge fact), may be empty.
    foils: for each answer, the wrong alternative a minimal-pair test compares with (agreement), or empty.
    """

    task: str
    objective: str
    tokens: tuple[str, ...]
    answer_positions: tuple[int, ...]
    source_positions: tuple[int, ...]
    kind: str = ""
    support_positions: tuple[int, ...] = ()
    foils: tuple[str, ...] = ()
    src_tokens: tuple[str, ...] = ()
    tgt_tokens: tuple[str, ...] = ()
    alignment: tuple[tuple[int, int], ...] = ()  # (tgt index, src index), one pair per target word

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, not {self.objective!r}")
        if not self.tokens or self.tokens[0] != BOS:
            raise ValueError("tokens must start with [BOS]")
        if len(self.answer_positions) != len(self.source_positions):
            raise ValueError("one source position per answer position")
        if self.foils and len(self.foils) != len(self.answer_positions):
            raise ValueError("one foil per answer position")
        if not all(0 < p < len(self.tokens) for p in self.answer_positions):
            raise ValueError("answer positions must index tokens after [BOS]")

    @property
    def answers(self) -> tuple[str, ...]:
        return tuple(self.tokens[p] for p in self.answer_positions)

    @property
    def query_positions(self) -> tuple[int, ...]:
        """The row (query) whose output predicts each answer: p - 1 causal/seq2seq, p masked."""
        shift = 0 if self.objective == "masked" else 1
        return tuple(p - shift for p in self.answer_positions)

    @property
    def masked_tokens(self) -> tuple[str, ...]:
        """`tokens` with every answer replaced by [MASK]: the masked-LM evaluation input."""
        hide = set(self.answer_positions)
        return tuple(MASK if i in hide else t for i, t in enumerate(self.tokens))

    @property
    def text(self) -> str:
        """The words of `tokens` without special tokens (tokenizing it gives `tokens` back)."""
        return " ".join(t for t in self.tokens if t not in SPECIAL_TOKENS)

    @property
    def src_text(self) -> str:
        return " ".join(t for t in self.src_tokens if t not in SPECIAL_TOKENS)
