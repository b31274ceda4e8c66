"""The first lecture's own story: a person's friends and best friend, their ages behind pronouns, and
distractor sentences with other numbers; the question is answered by two hops (best friend → age).

    [BOS] alex has a friend called john . he is 46 years of age . alex has a best friend named mary .
          she is 48 years young . alex has a bunch of orange cats who bully him . they are 2 or 3 years
          old . how old is the best friend of alex ? the age of his best friend is 48

Each friend is introduced by a "P has a (best) friend called/named N ." sentence, and the next sentence
gives that friend's age behind a pronoun. Every number in a story is distinct, so the answer's source is
the one token that states it; two-hop answers keep the bridge (the best friend's name in the sentence
that introduces them) in `support_positions`. Question kinds: "best" (the lecture's two hops), and the
one-hop lookups a curriculum teaches first: "bridge" (who is the best friend), "named" (the age of a
named friend, through the pronoun) and "self" (the owner's own age, also the tempting wrong hop).
"""

from __future__ import annotations

from random import Random

from .tasks_base import BOS, Example

STORY_LEN = 95  # tokens, [BOS] and the answers included: a decoder trained with --context 96
FIRST_LEN = 80  # a story with its first question and answer (the lecture's own: 65), leaving room for more
MALE = ("alex", "john", "tom", "ben", "sam", "paul", "mark", "jack", "nick", "leo")
FEMALE = ("mary", "anna", "lisa", "emma", "kate", "sara", "lucy", "eva", "nora", "mia")
PRONOUN = {"m": ("he", "him", "his"), "f": ("she", "her", "her")}
PEOPLE_AGES = tuple(range(20, 80))  # a friend's or owner's age
SMALL = tuple(range(1, 16))  # the cats', the dog's ages
NUMBERS = tuple(str(n) for n in range(1, 100))

INTRO = (("P", "has", "a", "friend", "called", "N", "."), ("P", "has", "a", "friend", "named", "N", "."))
BEST = (("P", "has", "a", "best", "friend", "named", "N", "."), ("P", "has", "a", "best", "friend", "called", "N", "."))
AGE = (("S", "is", "A", "years", "of", "age", "."), ("S", "is", "A", "years", "young", "."),
       ("S", "is", "A", "years", "old", "."))
OWN_AGE = (("P", "is", "A", "years", "old", "."), ("P", "is", "A", "years", "of", "age", "."))
CATS = ("P", "has", "a", "bunch", "of", "orange", "cats", "who", "bully", "O", ".",
        "they", "are", "A", "or", "B", "years", "old", ".")
DOG = ("P", "has", "a", "dog", "who", "is", "A", "years", "old", ".")
HOUSE = ("P", "lives", "at", "number", "A", ".")
# Question kind → (question, answer lead); "X" the owner asked about, "N" a friend, "H" the owner's possessive.
QUESTIONS = {
    "best": (("how", "old", "is", "the", "best", "friend", "of", "X", "?"), ("the", "age", "of", "H", "best", "friend", "is")),
    "bridge": (("who", "is", "the", "best", "friend", "of", "X", "?"), ("the", "best", "friend", "of", "X", "is")),
    "named": (("how", "old", "is", "N", "?"), ("N", "is")),
    "self": (("how", "old", "is", "X", "?"), ("X", "is")),
}
ONE_HOP = ("bridge", "named", "self")
QUESTION_WEIGHTS = {"best": 3, "bridge": 1, "named": 1, "self": 1}

WORDS = (MALE + FEMALE + NUMBERS + tuple(w for p in PRONOUN.values() for w in p)
         + tuple(w for group in (INTRO, BEST, AGE, OWN_AGE, (CATS, DOG, HOUSE)) for t in group for w in t)
         + tuple(w for q, a in QUESTIONS.values() for w in q + a))
WORDS = tuple(sorted({w for w in WORDS if w not in ("P", "N", "S", "O", "A", "B", "X", "H")}))


def _fill(template, **slots) -> list[str]:
    return [slots.get(w, w) for w in template]


def story(rng: Random, objective: str = "causal", question: str | None = None) -> Example:
    """One story and its first question (kind drawn by QUESTION_WEIGHTS unless `question` is given)."""
    names = rng.sample(MALE, 4) + rng.sample(FEMALE, 4)
    rng.shuffle(names)
    gender = {n: "m" if n in MALE else "f" for n in names}
    owner, best, *others = names[:rng.randint(3, 5)]
    friends = others[:rng.randint(1, len(others))]
    numbers = rng.sample(PEOPLE_AGES, 8)
    blocks = []  # (sentences, optional?) — a block keeps a friend's intro and age sentence together
    age = {}
    for n, kind in [(best, BEST)] + [(f, INTRO) for f in friends]:
        age[n] = str(numbers.pop())
        words = _fill(rng.choice(kind), P=owner, N=n) + _fill(rng.choice(AGE), S=PRONOUN[gender[n]][0], A=age[n])
        blocks.append((words, kind is INTRO))
    if friends and rng.random() < 0.5:  # a friend with a best friend of their own: "of X" matters
        host, theirs = friends[0], names[len(names) - 1]
        age[theirs] = str(numbers.pop())
        words = (_fill(rng.choice(BEST), P=host, N=theirs)
                 + _fill(rng.choice(AGE), S=PRONOUN[gender[theirs]][0], A=age[theirs]))
        blocks.append((words, True))
        best_of = {owner: best, host: theirs}
    else:
        best_of = {owner: best}
    small = [str(n) for n in rng.sample(SMALL, 4)]
    if rng.random() < 0.6:
        age[owner] = str(numbers.pop())
        blocks.append((_fill(rng.choice(OWN_AGE), P=owner, A=age[owner]), True))
    blocks.append((_fill(CATS, P=owner, O=PRONOUN[gender[owner]][1], A=small[0], B=small[1]), True))
    if rng.random() < 0.5:
        blocks.append((_fill(DOG, P=owner, A=small[2]), True))
    if rng.random() < 0.5:
        blocks.append((_fill(HOUSE, P=owner, A=str(numbers.pop())), True))
    rng.shuffle(blocks)

    options = [("best", x) for x in best_of] * 3 + [("bridge", x) for x in best_of]
    options += [("named", n) for n in age if n != owner] + ([("self", owner)] if owner in age else [])
    if question is not None:
        options = [o for o in options if o[0] == question] or [("best", owner)]
    else:
        kind = rng.choices(list(QUESTION_WEIGHTS), list(QUESTION_WEIGHTS.values()))[0]
        options = [o for o in options if o[0] == kind] or options
    qkind, x = rng.choice(options)
    q = _question(qkind, x, gender)
    while 1 + sum(len(b) for b, _ in blocks) + len(q) + 1 > FIRST_LEN:
        blocks.remove(rng.choice([b for b in blocks if b[1] and not _needed(b[0], qkind, x, best_of)]))
    tokens = [BOS] + [w for b, _ in blocks for w in b]
    return _answer(Example("story", objective, tuple(tokens), (), (), kind=qkind), q)


def _needed(words, qkind: str, x: str, best_of: dict) -> bool:
    """Does this block state what the question needs (the fact, the bridge, or the tempting wrong hop)?"""
    if qkind in ("best", "bridge"):
        return words[0] == x and best_of[x] in words
    if qkind == "self":
        return words[:2] == [x, "is"]
    return x in words and "friend" in words


def _question(qkind: str, x: str, gender: dict) -> list[str]:
    q, lead = QUESTIONS[qkind]
    slots = {"X": x, "N": x, "H": PRONOUN[gender.get(x, "m" if x in MALE else "f")][2]}
    return _fill(q, **slots) + _fill(lead, **slots)


def facts(tokens) -> tuple[dict, dict]:
    """Read a story (tokens up to its first question): ({owner: (best friend, index)}, {person: (age, index)}).
    An age sentence that opens with a pronoun belongs to the friend introduced just before it."""
    best, ages, last = {}, {}, None
    starts = [int(tokens[:1] == [BOS])] + [i + 1 for i, t in enumerate(tokens) if t in (".", "?")]
    for s in starts:
        if s >= len(tokens) or tokens[s] in ("how", "who"):  # the first question: the story ends
            break
        words = tokens[s:]
        if words[1:3] == ["has", "a"] and "friend" in words[3:5]:
            end = words.index(".")
            last = words[end - 1]
            if words[3] == "best":
                best[words[0]] = (last, s + end - 1)
        elif words[1] == "is" and words[3:4] == ["years"] and words[2] in NUMBERS:
            who = last if words[0] in ("he", "she") else words[0]
            ages[who] = (words[2], s + 2)
    return best, ages


def solve_story(tokens) -> tuple[str, int]:
    """(answer, index of the token that states it) of the first question in a story; tokens from [BOS] up
    to the answer lead ("... best friend is"). Raises ValueError when the story does not say."""
    tokens = list(tokens)
    best, ages = facts(tokens)
    q = tokens.index("?")
    start = max(i for i in range(q) if tokens[i] == ".") + 1
    words = tokens[start:q]
    if words[:2] == ["who", "is"]:
        return best[words[-1]]
    if words[:3] != ["how", "old", "is"]:
        raise ValueError(f"not a story question: {' '.join(words)}")
    who = best[words[-1]][0] if "friend" in words else words[-1]
    if who not in ages:
        raise ValueError(f"the story never states the age of {who}")
    return ages[who]


def _answer(ex: Example, q: list[str]) -> Example:
    """`ex`'s tokens + question `q` + its answer, with the answer's source (and the bridge of a two-hop)."""
    tokens = list(ex.tokens)
    best, _ = facts(tokens)
    tokens += q
    value, source = solve_story(tokens)
    words = q[: q.index("?")]
    bridge = (best[words[-1]][1],) if "friend" in words and words[0] == "how" else ()
    tokens.append(value)
    return Example("story", ex.objective, tuple(tokens), ex.answer_positions + (len(tokens) - 1,),
                   ex.source_positions + (source,), kind=ex.kind, support_positions=ex.support_positions + bridge)


def ask_more_story(ex: Example, rng: Random, n: int, max_len: int, one_hop: bool = False) -> Example:
    """`ex` with up to `n` more questions about the same story (each after " . "), while within `max_len`."""
    story_end = ex.tokens.index("?")
    story_end = max(i for i in range(story_end) if ex.tokens[i] == ".") + 1
    best, ages = facts(list(ex.tokens[:story_end]))
    gender: dict = {}
    asked = {tuple(ex.tokens[story_end:-1])}
    for _ in range(n):
        options = [("bridge", x) for x in best] + [("named", p) for p in ages]  # "self" reads as "named"
        if not one_hop:
            options += [("best", x) for x in best] * 3
        rng.shuffle(options)
        for qkind, x in options:
            q = ["."] + _question(qkind, x, gender)
            if tuple(q[1:]) not in asked:
                break
        else:
            break
        if len(ex.tokens) + len(q) + 1 > max_len:
            break
        asked.add(tuple(q[1:]))
        value, source = solve_story(list(ex.tokens[:story_end]) + q[1:])
        bridge = (best[x][1],) if qkind == "best" else ()
        tokens = ex.tokens + tuple(q) + (value,)
        ex = Example("story", ex.objective, tokens, ex.answer_positions + (len(tokens) - 1,),
                     ex.source_positions + (source,), kind=ex.kind, support_positions=ex.support_positions + bridge)
    return ex
