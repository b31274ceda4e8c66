"""The faithfulness benchmark's cases: lecture examples whose answers have known sources, one scored answer each
(drawn with a seeded RNG), as the query row, the answer's id, its source positions and the positions a method may
rank (analysis.faithfulness.benchmark says which, and why)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from random import Random

import numpy as np
import torch
from attnlab.model.inputs import InputError, Inputs
from attnlab.model.lecture import SPECIAL_TOKENS, Example, decoder_examples, encdec_examples, encoder_examples


def examples_for(lm):
    """The lecture mixture's example maker for this kind of model, or None (no text examples: a vision transformer)."""
    if lm.reads_source:
        return encdec_examples
    if lm.predicts_next_token:
        return decoder_examples
    return encoder_examples if lm.fills_masks else None


@dataclass
class Case:
    """One scored prediction: the input, the query row, the correct token and where it comes from."""

    inputs: Inputs
    query: int  # row whose output predicts the answer
    answer_id: int
    sources: tuple[int, ...]  # ground-truth source positions (target side, or source side for encdec)
    candidates: np.ndarray  # bool over ranked positions: True = may be ranked
    example: Example | None = None


# -- examples -> cases ----------------------------------------------------------------------------------
def token_ids(tokenizer, tokens) -> list[int]:
    """Ids of lecture tokens. A tokenizer with a vocabulary must know every token (InputError otherwise).

    The byte tokenizer of the random models gets one stand-in id per word (specials map to its
    specials, other words to crc32(word) mod 256), so positions still line up; on those models the
    benchmark is only a smoke test.
    """
    inner = getattr(tokenizer, "tok", None)
    if inner is not None:
        vocab = inner.get_vocab(with_added_tokens=True)
        missing = [t for t in tokens if t not in vocab]
        if missing:
            raise InputError(f"the model's vocabulary lacks the lecture token {missing[0]!r}; the faithfulness "
                             "benchmark runs on the lecture models (or the random ones)")
        return [vocab[t] for t in tokens]
    special = {"[BOS]": tokenizer.bos_id, "[EOS]": tokenizer.eos_id, "[PAD]": tokenizer.pad_id,
               "[MASK]": tokenizer.mask_id, "[UNK]": tokenizer.pad_id, "[SEP]": tokenizer.eos_id}
    return [special[t] if t in special else zlib.crc32(t.encode()) % 256 for t in tokens]


def _not_special(tokens) -> np.ndarray:
    return np.array([t not in SPECIAL_TOKENS for t in tokens])


def example_case(lm, ex: Example, rng: Random) -> Case | None:
    """The Case for one answer of `ex` drawn by `rng`; None if no answer has a rankable source."""
    seq = ex.masked_tokens if lm.fills_masks else ex.tokens
    ids = token_ids(lm.tokenizer, seq)
    t = len(ids)
    pairs = list(zip(ex.answer_positions, ex.query_positions, ex.source_positions))
    if lm.reads_source:
        src_ids = token_ids(lm.src_tokenizer or lm.tokenizer, ex.src_tokens)
        if max(t, len(src_ids)) > lm.context:
            raise InputError(f"an example has {max(t, len(src_ids))} tokens; {lm.name} takes {lm.context}")
        inputs = Inputs(torch.tensor([ids]), list(seq), torch.tensor([src_ids]), list(ex.src_tokens))
        cand = _not_special(ex.src_tokens)
        eligible = [(p, q, s) for p, q, s in pairs if cand[s]]
    else:
        if t > lm.context:
            raise InputError(f"an example has {t} tokens; {lm.name} takes {lm.context}")
        inputs = Inputs(torch.tensor([ids]), list(seq))
        base = _not_special(seq)
        eligible = [(p, q, s) for p, q, s in pairs if _self_candidates(base, q, lm.is_causal)[s]]
    if not eligible:
        return None
    p, q, s = eligible[rng.randrange(len(eligible))]
    answer = token_ids(lm.tokenizer, [ex.tokens[p]])[0]
    cand = cand if lm.reads_source else _self_candidates(base, q, lm.is_causal)
    return Case(inputs, q, answer, (s,), cand, ex)


def _self_candidates(not_special: np.ndarray, q: int, causal: bool) -> np.ndarray:
    c = not_special.copy()
    if causal:
        c[q + 1:] = False  # the query cannot see later tokens
    c[q] = False
    return c


def make_cases(lm, n: int, seed: int = 0, examples: list[Example] | None = None) -> list[Case]:
    """Cases from `examples`, or the first n eval examples of the model's lecture mixture for `seed`."""
    check_model(lm)
    if examples is None:
        examples = examples_for(lm)(n, seed, split="eval")
    rng = Random(f"attnlab.faithfulness|{seed}")
    cases = [example_case(lm, ex, rng) for ex in examples]
    return [c for c in cases if c is not None]


def check_model(lm) -> None:
    if examples_for(lm) is None:
        raise InputError(f"{lm.name} is a {lm.kind}: the faithfulness benchmark's examples are text")
    if lm.cfg.output_head_kind == "none":
        raise InputError(f"{lm.name} has no language-model head; the faithfulness benchmark needs one "
                         "(an encoder needs its masked-LM head)")


def chance(case: Case) -> float:
    """Top-1 hit rate of a random ranking: sources among the candidates / number of candidates."""
    return sum(bool(case.candidates[s]) for s in set(case.sources)) / int(case.candidates.sum())
