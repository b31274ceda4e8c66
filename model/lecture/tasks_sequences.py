"""Induction (a random sequence that repeats) and bracket matching.

Induction (decoder and encoder): [BOS] + 0-4 filler words + a pattern of 4-28 distinct words + the
pattern again (its first half or more). No word occurs twice before the second copy, so the earlier
occurrence is unique:

    [BOS] kelu | vidu plopa grano tovan | vidu plopa grano
    causal answers: every word of the second copy after its first; the source of answer p is the
    token after the earlier occurrence of tokens[p - 1] (== the earlier copy of tokens[p]).
    masked answers: one or two non-adjacent words of the second copy (its first word included).

Brackets (encoder, masked LM): a balanced sequence of ( [ { < ) ] } > with one closer as the answer
(three times in four one with something inside, if there is one); its source is the matching opener.
With the closer masked the rest is balanced-but-one, so the masked token is determined.
"""

from __future__ import annotations

from random import Random

from .tasks_base import BOS, MAX_LEN, Example
from .tasks_language import ADJECTIVES, INTRANSITIVE, LEXICON, NOUNS, VERBS
from .tasks_retrieval import AGES, NAMES, PETS

OPENERS, CLOSERS = ("(", "[", "{", "<"), (")", "]", "}", ">")
CLOSER_OF = dict(zip(OPENERS, CLOSERS))

# Content words only (no punctuation, brackets or specials), in a fixed order.
INDUCTION_POOL = tuple(dict.fromkeys(
    NAMES + AGES + PETS + tuple(w for pair in NOUNS for w in pair) + tuple(w for pair in VERBS for w in pair)
    + INTRANSITIVE + ADJECTIVES + tuple(v for v in LEXICON.values() if v != ".")))

WORDS = INDUCTION_POOL + OPENERS + CLOSERS


def induction(rng: Random, objective: str = "causal") -> Example:
    n = rng.randint(4, 28)
    fill = rng.randint(0, 4)
    words = rng.sample(INDUCTION_POOL, n + fill)
    filler, pattern = words[:fill], words[fill:]
    m = rng.randint(max(3, n // 2), n)
    tokens = (BOS, *filler, *pattern, *pattern[:m])
    assert len(tokens) <= MAX_LEN - 1
    second = 1 + fill + n  # index of the second copy's first word
    if objective == "causal":
        answers = list(range(second + 1, second + m))
    else:
        first = rng.randrange(second, second + m)
        answers = [first]
        far = [p for p in range(second, second + m) if abs(p - first) > 1]
        if far and rng.random() < 0.5:
            answers = sorted([first, rng.choice(far)])
    return Example("induction", objective, tokens, tuple(answers), tuple(p - n for p in answers),
                   kind="short" if n <= 12 else "long")


def solve_induction(tokens, position: int) -> tuple[str, int]:
    """Causal rule: find the last earlier occurrence q of tokens[position - 1]; answer tokens[q + 1]."""
    prev = tokens[position - 1]
    q = max(i for i in range(position - 1) if tokens[i] == prev)
    return tokens[q + 1], q + 1


def brackets(rng: Random, objective: str = "masked") -> Example:
    pairs = rng.randint(3, (MAX_LEN - 2) // 2)
    max_depth = rng.randint(2, 8)
    tokens, stack, opener_of = [BOS], [], {}
    left = pairs
    while left or stack:
        if not stack or (left and len(stack) < max_depth and rng.random() < 0.5):
            stack.append(len(tokens))
            tokens.append(rng.choice(OPENERS))
            left -= 1
        else:
            o = stack.pop()
            opener_of[len(tokens)] = o
            tokens.append(CLOSER_OF[tokens[o]])
    nested = [c for c in sorted(opener_of) if c - opener_of[c] > 1]
    # Three times in four the answer closes a pair with something inside (when there is one).
    answer = rng.choice(nested if nested and rng.random() < 0.75 else sorted(opener_of))
    return Example("brackets", objective, tuple(tokens), (answer,), (opener_of[answer],),
                   kind="adjacent" if answer - opener_of[answer] == 1 else "nested")


def solve_brackets(tokens, position: int) -> tuple[str, int]:
    """Treat `position` as a closer (it may be [MASK]): return (its closer, index of its opener)."""
    stack = []
    for i, t in enumerate(tokens):
        if i == position:
            o = stack.pop()
            return CLOSER_OF[tokens[o]], o
        if t in OPENERS:
            stack.append(i)
        elif t in CLOSERS:
            stack.pop()
    raise ValueError(f"position {position} is past the end")


def mask_more(ex: Example, rng: Random, share: float = 0.3) -> Example:
    """A masked induction or brackets example with more answers hidden (training only): about `share` of
    the second copy's words (never two adjacent ones, so each keeps a visible neighbour), or of the
    closers (with every opener visible, a [MASK] can only be a closer, so each stays determined).
    The original answers stay hidden; other tasks come back unchanged."""
    if ex.objective != "masked" or ex.task not in ("induction", "brackets"):
        return ex
    hidden = set(ex.answer_positions)
    if ex.task == "induction":
        n = ex.answer_positions[0] - ex.source_positions[0]  # pattern length: copy p − n of answer p
        # the second copy: no word repeats before it, so only its words equal the word n earlier
        candidates = [p for p in range(n + 1, len(ex.tokens)) if ex.tokens[p] == ex.tokens[p - n]]
    else:
        candidates = [p for p, t in enumerate(ex.tokens) if t in CLOSERS]
    for p in rng.sample(candidates, len(candidates)):
        if len(hidden) >= max(len(ex.answer_positions), round(share * len(candidates))):
            break
        if ex.task == "induction" and (p - 1 in hidden or p + 1 in hidden):
            continue
        hidden.add(p)
    answers = sorted(hidden)
    if ex.task == "induction":
        sources = [p - n for p in answers]
    else:
        sources = [solve_brackets(ex.tokens, p)[1] for p in answers]
    return Example(ex.task, ex.objective, ex.tokens, tuple(answers), tuple(sources), kind=ex.kind)
