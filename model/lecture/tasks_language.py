"""Agreement across a distractor, and a toy translation that reorders words.

Agreement (decoder and encoder): the copula agrees with the head noun, across a relative clause or a
prepositional phrase whose noun (the attractor) has the opposite number half of the time and the
same number otherwise, so the attractor carries no information about the answer:

    [BOS] the dogs that the cat chases are happy .      answer "are" (foil "is"), source "dogs"
    [BOS] the small hen near the foxes is quiet .        answer "is"  (foil "are"), source "hen"

Translation (encoder-decoder): every word has one translation; inside a noun phrase everything after
the determiner is mirrored (adjective-noun swap), the verb goes to the end of its clause:

    the big red dog sees a cat .   ->   ka vasko roda grano na miru vidu .
"""

from __future__ import annotations

from random import Random

from .tasks_base import BOS, EOS, MAX_LEN, Example

NOUNS = (("cat", "cats"), ("dog", "dogs"), ("hawk", "hawks"), ("frog", "frogs"), ("fox", "foxes"),
         ("hen", "hens"), ("goat", "goats"), ("rabbit", "rabbits"), ("turtle", "turtles"), ("mouse", "mice"),
         ("farmer", "farmers"), ("baker", "bakers"), ("child", "children"), ("teacher", "teachers"))
VERBS = (("chases", "chase"), ("sees", "see"), ("likes", "like"), ("follows", "follow"), ("feeds", "feed"),
         ("helps", "help"), ("watches", "watch"))  # (singular, plural)
INTRANSITIVE = ("runs", "sleeps", "sings", "jumps", "waits")
PREPOSITIONS = ("near", "behind", "beside", "with")
ADJECTIVES = ("happy", "sleepy", "hungry", "small", "big", "loud", "quiet", "brave", "tired", "calm",
              "red", "green")
COPULA = ("is", "are")  # (singular, plural)
NUMBER_OF = {form: n for pair in NOUNS for n, form in enumerate(pair)}  # noun form -> 0 singular, 1 plural

# Source word -> target word (the target language is ours, invented).
LEXICON = {
    "the": "ka", "a": "na", "and": "kaj", ".": ".",
    "today": "hodi", "now": "nuna", "often": "ofta",
    "cat": "miru", "dog": "vasko", "hawk": "kiral", "frog": "plopa", "fox": "rusko", "hen": "tiki",
    "goat": "bemo", "rabbit": "lapi", "turtle": "tartu", "mouse": "musi", "farmer": "grundo",
    "baker": "panto", "child": "kelu", "teacher": "dosa",
    "happy": "feli", "sleepy": "dormo", "hungry": "famu", "small": "piko", "big": "grano", "loud": "bruma",
    "quiet": "silo", "brave": "koro", "tired": "lasu", "calm": "pasi", "red": "roda", "green": "vera",
    "chases": "kuru", "sees": "vidu", "likes": "amu", "follows": "segu", "feeds": "nutri", "helps": "aido",
    "watches": "gardu", "runs": "rapo", "sleeps": "zumi", "sings": "kanto", "jumps": "salto", "waits": "atendi",
}
DETERMINERS, ADVERBS = ("the", "a"), ("today", "now", "often")
TRANSITIVE = tuple(sg for sg, _ in VERBS)

WORDS = (tuple(w for pair in NOUNS for w in pair) + tuple(w for pair in VERBS for w in pair) + INTRANSITIVE
         + PREPOSITIONS + ADJECTIVES + COPULA + ("the", "that", ".") + tuple(LEXICON) + tuple(LEXICON.values()))


def agreement(rng: Random, objective: str = "causal", p_attractor: float = 0.5) -> Example:
    i, j = rng.sample(range(len(NOUNS)), 2)
    n1 = int(rng.random() < 0.5)
    attractor = rng.random() < p_attractor
    n2 = 1 - n1 if attractor else n1
    tokens = [BOS, "the"] + ([rng.choice(ADJECTIVES)] if rng.random() < 0.3 else [])
    subject = len(tokens)
    tokens.append(NOUNS[i][n1])
    structure = rng.choice(("rel", "pp"))
    tokens += ["that", "the"] if structure == "rel" else [rng.choice(PREPOSITIONS), "the"]
    tokens += [rng.choice(ADJECTIVES)] if rng.random() < 0.3 else []
    tokens.append(NOUNS[j][n2])
    if structure == "rel":
        tokens.append(rng.choice(VERBS)[n2])  # agrees with the attractor, not with the subject
    verb = len(tokens)
    tokens += [COPULA[n1], rng.choice(ADJECTIVES), "."]
    kind = f"{structure}-{'attractor' if attractor else 'match'}"
    return Example("agreement", objective, tuple(tokens), (verb,), (subject,), kind=kind, foils=(COPULA[1 - n1],))


def solve_agreement(tokens, position: int) -> tuple[str, int]:
    """The copula at `position` agrees with the first noun: return (copula, index of that noun)."""
    subject = next(i for i, t in enumerate(tokens) if t in NUMBER_OF and i < position)
    return COPULA[NUMBER_OF[tokens[subject]]], subject


def _noun_phrase(rng: Random) -> list[str]:
    adjectives = rng.sample(ADJECTIVES, rng.choices((0, 1, 2), (4, 4, 2))[0])
    return [rng.choice(DETERMINERS)] + adjectives + [rng.choice(NOUNS)[0]]


def translate(words) -> tuple[list[str], list[int]]:
    """Source words (no specials) -> (target words, index of the source word each one translates).

    Grammar: clause ("and" clause)* "."; clause = [adverb] NP verb [NP]; NP = determiner adjective* noun.
    Target: adverb stays first, each NP becomes determiner + mirrored rest, the verb moves to the end.
    """
    words = list(words)
    try:
        return _translate(words)
    except IndexError:
        raise ValueError("the sentence stops early; it must end with '.'") from None


def _translate(words: list[str]) -> tuple[list[str], list[int]]:
    out: list[int] = []
    i = 0

    def noun_phrase() -> list[int]:
        nonlocal i
        if words[i] not in DETERMINERS:
            raise ValueError(f"expected a determiner at word {i}, got {words[i]!r}")
        start = i
        i += 1
        while words[i] in ADJECTIVES:
            i += 1
        if NUMBER_OF.get(words[i]) != 0:
            raise ValueError(f"expected a singular noun at word {i}, got {words[i]!r}")
        i += 1
        return [start] + list(range(i - 1, start, -1))

    while True:
        if words[i] in ADVERBS:
            out.append(i)
            i += 1
        out += noun_phrase()
        verb = i
        if words[verb] not in TRANSITIVE + INTRANSITIVE:
            raise ValueError(f"expected a verb at word {verb}, got {words[verb]!r}")
        i += 1
        if words[verb] in TRANSITIVE:
            out += noun_phrase()
        out.append(verb)
        if words[i] == "and":
            out.append(i)
            i += 1
            continue
        if words[i] != "." or i != len(words) - 1:
            raise ValueError(f"expected the final '.' at word {i}")
        out.append(i)
        return [LEXICON[words[k]] for k in out], out


def translation(rng: Random, objective: str = "seq2seq") -> Example:
    src: list[str] = []
    for c in range(2 if rng.random() < 0.3 else 1):
        src += ["and"] if c else []
        src += [rng.choice(ADVERBS)] if rng.random() < 0.25 else []
        src += _noun_phrase(rng)
        if rng.random() < 0.7:
            src += [rng.choice(TRANSITIVE)] + _noun_phrase(rng)
        else:
            src.append(rng.choice(INTRANSITIVE))
    src.append(".")
    tgt, align = translate(src)
    assert len(src) + 1 <= MAX_LEN and len(tgt) + 2 <= MAX_LEN
    src_tokens, tgt_tokens = (BOS, *src), (BOS, *tgt, EOS)
    alignment = tuple((j + 1, a + 1) for j, a in enumerate(align))
    kind = "two-clauses" if "and" in src else "transitive" if set(src) & set(TRANSITIVE) else "intransitive"
    return Example("translation", objective, tgt_tokens, tuple(j for j, _ in alignment),
                   tuple(a for _, a in alignment), kind=kind, src_tokens=src_tokens, tgt_tokens=tgt_tokens,
                   alignment=alignment)
