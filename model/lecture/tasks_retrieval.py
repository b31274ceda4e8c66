"""Fact retrieval: a short story about 3-5 people, then a question answered by one earlier fact.

    [BOS] corin is eleven . corin has a hen . the best friend of alvo is corin . alvo is nine .
          alvo owns a frog . how old is the best friend of alvo ? eleven

Facts are grouped per person (friend facts sit with the person they are about). Ages and pets are
distinct within a story, so each answer token is stated exactly once; the source is that token.
Two-hop questions ("... the best friend of X ...") also keep X's own fact of the same relation as
a distractor, and `support_positions` points at the bridge (the friend's name in the friend fact).
"""

from __future__ import annotations

from random import Random

from .tasks_base import BOS, MAX_LEN, Example

NAMES = ("alvo", "bexa", "corin", "dalu", "eskel", "fenna", "garo", "hildo", "ivra", "jorun", "kesi",
         "lumo", "marek", "nilo", "orsa", "pim", "quill", "rasmo", "sefi", "tovan", "ulla", "veno",
         "wisk", "yara")
AGES = ("five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen",
        "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
PETS = ("cat", "dog", "hawk", "frog", "fox", "hen", "goat", "rabbit", "turtle", "parrot", "mouse", "snail")

# Sentence templates: "P" is the person the fact is about, "V" the value (age, pet, friend's name).
TEMPLATES = {
    "age": (("P", "is", "V", "."), ("P", "is", "V", "years", "old", ".")),
    "pet": (("P", "has", "a", "V", "."), ("P", "owns", "a", "V", ".")),
    "friend": (("the", "best", "friend", "of", "P", "is", "V", "."),
               ("V", "is", "the", "best", "friend", "of", "P", ".")),
}
# Questions: "X" is the person asked about. Value: (question, relation answered, two-hop?).
QUESTIONS = {
    "age": (("how", "old", "is", "X", "?"), "age", False),
    "pet": (("what", "pet", "does", "X", "have", "?"), "pet", False),
    "friend": (("who", "is", "the", "best", "friend", "of", "X", "?"), "friend", False),
    "friend_age": (("how", "old", "is", "the", "best", "friend", "of", "X", "?"), "age", True),
    "friend_pet": (("what", "pet", "does", "the", "best", "friend", "of", "X", "have", "?"), "pet", True),
}
ONE_HOP = tuple(q for q, (_, _, two_hop) in QUESTIONS.items() if not two_hop)  # question kinds one fact answers
QUESTION_WEIGHTS = {"age": 1, "pet": 1, "friend": 1, "friend_age": 2, "friend_pet": 2}

WORDS = (NAMES + AGES + PETS
         + tuple(w for ts in TEMPLATES.values() for t in ts for w in t if w not in ("P", "V"))
         + tuple(w for q, _, _ in QUESTIONS.values() for w in q if w != "X"))


def _fill(template, person: str, value: str) -> tuple[list[str], int]:
    """Template → words, and the index of the value within them."""
    words = [person if w in ("P", "X") else value if w == "V" else w for w in template]
    return words, template.index("V") if "V" in template else -1


def retrieval(rng: Random, objective: str = "causal", question: str | None = None) -> Example:
    k = rng.randint(3, 5)
    people = rng.sample(NAMES, k)
    value = {"age": dict(zip(people, rng.sample(AGES, k))), "pet": dict(zip(people, rng.sample(PETS, k)))}
    value["friend"] = {p: rng.choice([q for q in people if q != p]) for p in people}
    qtype = question or rng.choices(list(QUESTION_WEIGHTS), list(QUESTION_WEIGHTS.values()))[0]
    qwords, rel, two_hop = QUESTIONS[qtype]
    x = rng.choice(people)
    target = value["friend"][x] if two_hop else x

    facts = [("age", p) for p in people] + [("pet", p) for p in people]
    facts += [("friend", p) for p in people if rng.random() < 0.5]
    needed = [(rel, target)] + ([("friend", x)] if two_hop else [])
    facts += [f for f in needed if f not in facts]
    protected = list(needed) + ([(rel, x)] if two_hop else [])  # x's own age/pet: the tempting wrong hop
    for r, who in needed:  # at least one distractor fact of the same relation about someone else
        others = [f for f in facts if f[0] == r and f not in protected]
        if not others:
            extra = (r, rng.choice([p for p in people if p != who and (r, p) not in facts]))
            facts.append(extra)
            others = [extra]
        protected.append(rng.choice(others))
    for f in protected:
        if f not in facts:
            facts.append(f)
    template = {f: rng.choice(TEMPLATES[f[0]]) for f in facts}

    def length() -> int:  # [BOS] + story + question + answer
        return 1 + sum(len(template[f]) for f in facts) + len(qwords) + 1

    while length() > MAX_LEN - 1:
        facts.remove(rng.choice([f for f in facts if f not in protected]))

    tokens, where = [BOS], {}
    for p in people:
        mine = [f for f in facts if f[1] == p]
        rng.shuffle(mine)
        for f in mine:
            words, v = _fill(template[f], p, value[f[0]][p])
            where[f] = len(tokens) + v
            tokens += words
    tokens += _fill(qwords, x, "")[0]
    tokens.append(value[rel][target])
    return Example("retrieval", objective, tuple(tokens), (len(tokens) - 1,), (where[(rel, target)],),
                   kind=qtype, support_positions=(where[("friend", x)],) if two_hop else ())


def _match(template, words: list[str]) -> tuple[str, str, int] | None:
    if len(template) != len(words):
        return None
    slots = {}
    for i, (t, w) in enumerate(zip(template, words)):
        if t in ("P", "V", "X"):
            slots[t] = (w, i)
        elif t != w:
            return None
    person = slots.get("P", slots.get("X"))[0]
    v = slots.get("V", ("", -1))
    return person, v[0], v[1]


def _story(tokens) -> tuple[dict, list[str], int]:
    """Parse tokens from [BOS] through the first "?": ({(relation, person): (value, index)}, the
    question's words, the index where the question starts)."""
    end = tokens.index("?")
    facts, start = {}, 1 if tokens[0] == BOS else 0
    sentences = []
    for i in range(start, end + 1):
        if tokens[i] in (".", "?"):
            sentences.append((start, tokens[start:i + 1]))
            start = i + 1
    *story, (qstart, qwords) = sentences
    for s, words in story:
        for rel, ts in TEMPLATES.items():
            for t in ts:
                m = _match(t, words)
                if m:
                    facts[(rel, m[0])] = (m[1], s + m[2])
    return facts, qwords, qstart


def solve_retrieval(tokens) -> tuple[str, int]:
    """Read a story and its question (tokens from [BOS] up to and including "?"; anything after is
    ignored) and return (answer token, index of the token that states it). Raises ValueError."""
    facts, qwords, _ = _story(list(tokens))
    for q, rel, two_hop in QUESTIONS.values():
        m = _match(q, qwords)
        if m:
            who = facts[("friend", m[0])][0] if two_hop else m[0]
            if (rel, who) not in facts:
                raise ValueError(f"the story never states the {rel} of {who}")
            return facts[(rel, who)]
    raise ValueError(f"not a known question: {' '.join(qwords)}")


def owner_position(tokens, source: int) -> int | None:
    """The index of the name a fact's value belongs to ("corin" in "corin is eleven ."), when it comes
    before the value in the fact's sentence; None when it comes after ("V is the best friend of P .").
    For a question's "?" (or its [MASK]), the name the question asks about."""
    start = max(i for i in range(source) if tokens[i] in (".", BOS)) + 1
    names = [i for i in range(start, source) if tokens[i] in NAMES]
    return names[-1] if names else None


def is_two_hop(tokens, answer: int) -> bool:
    """Does the question just before `answer` ask about the best friend's age or pet?"""
    start = max(i for i in range(answer) if tokens[i] in (".", BOS)) + 1
    words = tokens[start:answer]
    return "friend" in words and words[0] != "who"


def ask_more(ex: Example, rng: Random, n: int, max_len: int, one_hop: bool = False) -> Example:
    """`ex` (a one-question retrieval example) with up to `n` more questions about the same story, each
    after ". " and followed by its answer, while the tokens stay within `max_len`.

    Training only: a causal model predicts the first answer from exactly the held-out format's prefix,
    and every extra answer is another supervised lookup in the same story (more signal per sequence)."""
    tokens = list(ex.tokens)
    facts, qwords, _ = _story(tokens)
    people = sorted({who for _, who in facts})
    asked = {(q, m[0]) for q, (words, _, _) in QUESTIONS.items() if (m := _match(words, qwords))}
    answers, sources, support = list(ex.answer_positions), list(ex.source_positions), list(ex.support_positions)
    for _ in range(n):
        options = []
        for qtype, (_, rel, two_hop) in QUESTIONS.items():
            if two_hop and one_hop:  # a curriculum's first stage: one-hop questions only
                continue
            for x in people:
                target = facts.get(("friend", x), (None,))[0] if two_hop else x
                if (rel, target) in facts and (qtype, x) not in asked:
                    options += [(qtype, x)] * QUESTION_WEIGHTS[qtype]
        if not options:
            break
        qtype, x = rng.choice(options)
        qwords, rel, two_hop = QUESTIONS[qtype]
        words = ["."] + _fill(qwords, x, "")[0]
        if len(tokens) + len(words) + 1 > max_len:
            break
        asked.add((qtype, x))
        target = facts[("friend", x)][0] if two_hop else x
        value, where = facts[(rel, target)]
        tokens += words + [value]
        answers.append(len(tokens) - 1)
        sources.append(where)
        if two_hop:
            support.append(facts[("friend", x)][1])
    return Example(ex.task, ex.objective, tuple(tokens), tuple(answers), tuple(sources), kind=ex.kind,
                   support_positions=tuple(support))
