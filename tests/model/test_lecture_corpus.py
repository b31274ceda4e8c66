"""The lecture corpus: determinism, ground-truth positions, the shared tokenizer, the samples."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from attnlab.model.lecture import (
    BOS,
    EOS,
    MASK,
    MAX_LEN,
    SPECIAL_TOKENS,
    TASK_OBJECTIVES,
    TASKS,
    Example,
    decoder_examples,
    encdec_examples,
    encoder_examples,
    generate,
    model_examples,
    split_of,
    vocabulary,
)
from attnlab.model.lecture.samples import Sample, load_samples, validate_samples
from attnlab.model.lecture.tasks_language import ADJECTIVES, COPULA, LEXICON, NUMBER_OF, translate
from attnlab.model.lecture.tasks_retrieval import AGES, NAMES, PETS, solve_retrieval
from attnlab.model.lecture.tasks_sequences import CLOSER_OF, CLOSERS, OPENERS, solve_brackets, solve_induction
from attnlab.model.lecture.tasks_story import FIRST_LEN, solve_story
from attnlab.model.lecture.tokenizer import (
    build_tokenizer,
    unknown_words,
)
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
TASK_OBJ = [(t, o) for t in TASKS for o in TASK_OBJECTIVES[t]]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


# ---- determinism and splits -------------------------------------------------------------------

@pytest.mark.parametrize("task,objective", TASK_OBJ)
def test_same_seed_same_examples_other_seed_others(task, objective):
    a = generate(task, 30, seed=7, objective=objective)
    assert a == generate(task, 30, seed=7, objective=objective)
    b = generate(task, 30, seed=8, objective=objective)
    assert len(a) == len(b) == 30
    assert sum(x.tokens != y.tokens for x, y in zip(a, b)) >= 28


def test_pinned_first_examples_of_seed_0():
    """Changing these texts changes every trained checkpoint's corpus: retrain when you do."""
    first = {(t, o): generate(t, 1, 0, objective=o)[0] for t, o in TASK_OBJ}
    story = first[("retrieval", "causal")]
    assert story.text == (
        "marek is eight . rasmo owns a dog . the best friend of rasmo is corin . rasmo is seven years old . "
        "lumo is eleven . corin is seventeen . corin has a hawk . marek is the best friend of jorun . "
        "jorun is eighteen . jorun owns a mouse . how old is jorun ? eighteen")
    assert (story.answer_positions, story.source_positions, story.kind) == ((59,), (47,), "age")
    assert first[("retrieval", "masked")].tokens == story.tokens  # same stream for either objective
    agree = first[("agreement", "causal")]
    assert agree.tokens == (BOS, "the", "frogs", "behind", "the", "goat", "are", "tired", ".")
    assert (agree.answer_positions, agree.source_positions, agree.foils) == ((6,), (2,), ("is",))
    br = first[("brackets", "masked")]
    assert br.text == "{ { ( ) } { } }" and (br.answer_positions, br.source_positions) == ((7,), (6,))
    tr = first[("translation", "seq2seq")]
    assert tr.src_text == "a hungry calm hawk waits ." and tr.text == "na kiral pasi famu atendi ."
    assert tr.source_positions == (1, 4, 3, 2, 5, 6)
    ind = first[("induction", "causal")]
    assert ind.answer_positions == tuple(range(31, 47)) and ind.source_positions == tuple(range(5, 21))


def test_generation_does_not_depend_on_the_hash_seed():
    code = ("from model.lecture import model_examples as m; "
            "print('|'.join(e.src_text + e.text for k in ('decoder', 'encoder', 'encdec') for e in m(k, 20, 3)))")
    outs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": h}).stdout for h in ("1", "2")}
    assert len(outs) == 1 and len(next(iter(outs))) > 1000


def test_train_and_eval_are_disjoint_streams():
    train = decoder_examples(600, seed=0)
    ev = decoder_examples(200, seed=0, split="eval")
    assert {split_of(e) for e in train} == {"train"} and {split_of(e) for e in ev} == {"eval"}
    assert not {e.text for e in train} & {e.text for e in ev}
    tr2 = encdec_examples(300, 0)
    ev2 = encdec_examples(100, 0, split="eval")
    assert not {e.src_text for e in tr2} & {e.src_text for e in ev2}
    with pytest.raises(ValueError, match="split"):
        generate("retrieval", 1, 0, split="test")


def test_mixtures_have_their_tasks_and_objectives():
    dec, enc, ed = decoder_examples(400, 1), encoder_examples(400, 1), encdec_examples(50, 1)
    assert set(Counter(e.task for e in dec)) == {"retrieval", "induction", "agreement"}
    assert 150 < Counter(e.task for e in dec)["retrieval"] < 250  # weight 0.5
    assert set(Counter(e.task for e in enc)) == {"retrieval", "induction", "agreement", "brackets"}
    assert {e.objective for e in dec} == {"causal"} and {e.objective for e in enc} == {"masked"}
    assert {e.objective for e in ed} == {"seq2seq"} and {e.task for e in ed} == {"translation"}
    only = model_examples("encoder", 20, 1, weights={"brackets": 1.0})
    assert {e.task for e in only} == {"brackets"}
    with pytest.raises(ValueError, match="cannot be posed"):
        model_examples("decoder", 1, 0, weights={"brackets": 1.0})
    with pytest.raises(ValueError, match="unknown task"):
        generate("sorting", 1, 0)


@pytest.mark.parametrize("task,objective", TASK_OBJ)
def test_lengths_fit_the_context(task, objective):
    for e in generate(task, 300, 11, objective=objective):
        assert e.tokens[0] == BOS
        if objective == "seq2seq":
            assert len(e.src_tokens) <= MAX_LEN and len(e.tgt_tokens) <= MAX_LEN
        elif task == "story":  # the lecture's story: a decoder with --context 96
            assert len(e.tokens) <= FIRST_LEN
        else:
            assert len(e.tokens) <= MAX_LEN - 1  # room for an appended [EOS]


# ---- ground truth --------------------------------------------------------------------------------

def check_ground_truth(e: Example) -> None:
    toks = e.tokens
    assert all(0 < s < len(e.src_tokens or toks) for s in e.source_positions)
    if e.task == "retrieval":
        (p,), (s,) = e.answer_positions, e.source_positions
        assert p == len(toks) - 1 and toks[p - 1] == "?"
        assert toks[s] == toks[p] and s < p
        assert solve_retrieval(toks) == (toks[p], s)
        if e.kind in ("age", "friend_age"):
            assert toks[p] in AGES and toks[:p].count(toks[p]) == 1  # ages are distinct in a story
        elif e.kind in ("pet", "friend_pet"):
            assert toks[p] in PETS and toks[:p].count(toks[p]) == 1
        else:
            assert toks[p] in NAMES
        if e.kind.startswith("friend_"):
            (b,) = e.support_positions
            friend_of = toks[p - 2]  # "... of X ?" / "... of X have ?"
            friend_of = toks[p - 3] if friend_of == "have" else friend_of
            fact = toks[b - 6:b + 1] if toks[b - 1] == "is" else toks[b:b + 7]
            assert friend_of in fact and toks[b] in NAMES and toks[b] != friend_of
            assert toks[s - 2:s] == (toks[b], "is") or toks[s - 3:s] == (toks[b], "has", "a") or \
                toks[s - 3:s] == (toks[b], "owns", "a")
    elif e.task == "induction":
        for p, s in zip(e.answer_positions, e.source_positions):
            assert toks[s] == toks[p] and s < p
            assert toks[:p].count(toks[p]) == 1  # the earlier copy is the only one
            if e.objective == "causal":
                assert toks[s - 1] == toks[p - 1]
                assert solve_induction(toks, p) == (toks[p], s)
        if e.objective == "masked":
            assert len(e.answer_positions) in (1, 2)
            assert all(b - a > 1 for a, b in zip(e.answer_positions, e.answer_positions[1:]))
    elif e.task == "agreement":
        (p,), (s,) = e.answer_positions, e.source_positions
        assert toks[p] == COPULA[NUMBER_OF[toks[s]]] and e.foils == (COPULA[1 - NUMBER_OF[toks[s]]],)
        attractor = next(t for t in toks[s + 1:p] if t in NUMBER_OF)
        same = NUMBER_OF[attractor] == NUMBER_OF[toks[s]]
        assert e.kind.endswith("-match") if same else e.kind.endswith("-attractor")
        assert solve_agreement_masked(e) == (toks[p], s)
    elif e.task == "story":
        (p,), (s,) = e.answer_positions, e.source_positions
        assert p == len(toks) - 1 and toks[s] == toks[p] and toks[:p].count(toks[p]) == 1
        assert solve_story(toks[:p]) == (toks[p], s)
        if e.kind == "best":
            (b,) = e.support_positions
            assert toks[b - 4:b - 1] == ("a", "best", "friend") and toks[b - 6] == toks[p - 9]  # the owner asked about
            assert toks[b + 2] in ("he", "she") and toks[b + 4] == toks[p]  # the pronoun's sentence: the age
        else:
            assert e.support_positions == ()
    elif e.task == "brackets":
        (p,), (s,) = e.answer_positions, e.source_positions
        assert toks[s] in OPENERS and toks[p] == CLOSER_OF[toks[s]] and s < p
        depth = 0
        for t in toks[1:]:
            depth += 1 if t in OPENERS else -1
            assert depth >= 0 and t in OPENERS + CLOSERS
        assert depth == 0
        assert solve_brackets(e.masked_tokens, p) == (toks[p], s)
    elif e.task == "translation":
        src, tgt = e.src_tokens, e.tgt_tokens
        assert tgt == toks and tgt[0] == BOS and tgt[-1] == EOS and src[0] == BOS
        assert [j for j, _ in e.alignment] == list(range(1, len(tgt) - 1)) == list(e.answer_positions)
        assert [a for _, a in e.alignment] == list(e.source_positions)
        assert sorted(a for _, a in e.alignment) == list(range(1, len(src)))  # a permutation of the source
        for j, a in e.alignment:
            assert LEXICON[src[a]] == tgt[j]
        assert translate(src[1:]) == (list(tgt[1:-1]), [a - 1 for _, a in e.alignment])


def solve_agreement_masked(e: Example):
    from attnlab.model.lecture.tasks_language import solve_agreement

    return solve_agreement(e.masked_tokens, e.answer_positions[0])


@pytest.mark.parametrize("task,objective", TASK_OBJ)
def test_ground_truth_positions(task, objective):
    for e in generate(task, 200, 5, objective=objective):
        check_ground_truth(e)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), which=st.sampled_from(TASK_OBJ), split=st.sampled_from(["train", "eval"]))
def test_ground_truth_for_any_seed(seed, which, split):
    for e in generate(which[0], 3, seed, split=split, objective=which[1]):
        check_ground_truth(e)


def test_retrieval_question_kinds_and_distractors():
    exs = generate("retrieval", 400, 2)
    kinds = Counter(e.kind for e in exs)
    assert set(kinds) == {"age", "pet", "friend", "friend_age", "friend_pet"}
    assert kinds["friend_age"] + kinds["friend_pet"] > 400 * 0.4  # two-hop weighted 2:1
    for e in exs:
        story = e.tokens[:e.tokens.index("?")]
        people = {t for t in story if t in NAMES}
        assert len(people) >= 3
        pool = AGES if e.answers[0] in AGES else PETS if e.answers[0] in PETS else None
        if pool:  # another fact of the same relation is there to be confused with
            assert sum(t in pool for t in story) >= 2


def test_agreement_attractor_is_uninformative():
    exs = generate("agreement", 1000, 3)
    kinds = Counter(e.kind.split("-")[1] for e in exs)
    assert 400 < kinds["attractor"] < 600
    assert 400 < sum(e.answers == ("are",) for e in exs) < 600
    # The attractor's number, alone, predicts the verb no better than chance.
    agree = sum(NUMBER_OF[next(t for t in e.tokens[e.source_positions[0] + 1:] if t in NUMBER_OF)]
                == COPULA.index(e.answers[0]) for e in exs)
    assert 400 < agree < 600


def test_translation_reorders():
    words, align = translate("the big red dog sees a cat .".split())
    assert words == ["ka", "vasko", "roda", "grano", "na", "miru", "vidu", "."]
    assert align == [0, 3, 2, 1, 5, 6, 4, 7]
    words, align = translate("today a hen runs and the small fox helps a child .".split())
    assert words == "hodi na tiki rapo kaj ka rusko piko na kelu aido .".split()
    assert align == [0, 1, 2, 3, 4, 5, 7, 6, 9, 10, 8, 11]
    with pytest.raises(ValueError, match="determiner"):
        translate("dog sees a cat .".split())
    with pytest.raises(ValueError, match="stops early"):
        translate("the dog sees".split())
    exs = encdec_examples(200, 4)
    off_diagonal = sum(any(j != a for j, a in e.alignment) for e in exs)
    assert off_diagonal > 150  # most pairs need a reordering, not the diagonal
    assert Counter(e.kind for e in exs).keys() == {"transitive", "intransitive", "two-clauses"}


def test_example_checks_its_fields():
    with pytest.raises(ValueError, match="BOS"):
        Example("x", "causal", ("a",), (), ())
    with pytest.raises(ValueError, match="one source"):
        Example("x", "causal", (BOS, "a"), (1,), ())
    with pytest.raises(ValueError, match="objective"):
        Example("x", "greedy", (BOS, "a"), (1,), (1,))
    e = Example("x", "causal", (BOS, "a", "b", "a", "b"), (4,), (2,))
    assert e.query_positions == (3,) and e.answers == ("b",) and e.text == "a b a b"
    m = dataclasses.replace(e, objective="masked")
    assert m.query_positions == (4,) and m.masked_tokens == (BOS, "a", "b", "a", MASK)


# ---- vocabulary and tokenizer --------------------------------------------------------------------

def test_vocabulary_is_fixed_and_covers_the_corpus():
    v = vocabulary()
    assert len(v) == 322 and v == vocabulary() and v[:186] == vocabulary(story=False)
    assert tuple(v[:6]) == SPECIAL_TOKENS == ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "[SEP]")
    assert v[6:186] == sorted(v[6:186]) and v[186:] == sorted(v[186:]) and len(set(v)) == len(v)
    seen = set()
    for e in decoder_examples(500, 9) + encoder_examples(500, 9) + encdec_examples(300, 9):
        seen |= set(e.tokens) | set(e.src_tokens)
    assert seen <= set(v)
    assert len(set(LEXICON.values())) == len(LEXICON)  # one translation per word, none shared
    targets = set(LEXICON.values()) - {"."}
    assert not targets & (set(LEXICON) | set(NAMES) | set(ADJECTIVES) | set(NUMBER_OF))


def test_tokenizer_ids_and_round_trip(tok):
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4, 5]
    assert tok.get_vocab_size() == 322
    unk = tok.token_to_id("[UNK]")
    for e in decoder_examples(200, 2) + encoder_examples(200, 2) + encdec_examples(100, 2):
        enc = tok.encode(e.text)
        want = e.tokens[:-1] if e.objective == "seq2seq" else e.tokens  # the target's [EOS] is not added
        assert enc.tokens == list(want)
        assert unk not in enc.ids and enc.ids == [tok.token_to_id(t) for t in want]
        assert tok.decode(enc.ids) == e.text  # specials skipped, words joined by spaces
        assert tok.decode(enc.ids, skip_special_tokens=False) == " ".join(want)
        if e.src_tokens:
            assert tok.encode(e.src_text).tokens == list(e.src_tokens)


def test_tokenizer_specials_unknowns_and_pairs(tok):
    enc = tok.encode("how old is alvo ? [MASK]")
    assert enc.tokens == ["[BOS]", "how", "old", "is", "alvo", "?", "[MASK]"]
    assert enc.ids[0] == 2 and enc.ids[-1] == 4
    assert tok.encode("alvo is zebra").tokens == ["[BOS]", "alvo", "is", "[UNK]"]
    assert unknown_words("alvo is zebra . Alvo", tok) == ["zebra"]  # "Alvo" reads as alvo
    assert unknown_words("Alvo is a Zebra!", tok) == ["Zebra", "!"]  # as typed
    pair = tok.encode("the dog runs .", "ka vasko rapo .")
    assert pair.tokens == ["[BOS]", "the", "dog", "runs", ".", "[SEP]", "ka", "vasko", "rapo", "."]
    assert pair.type_ids == [0] * 6 + [1] * 4
    with pytest.raises(ValueError, match="start with"):
        build_tokenizer(["a", "b"])


# ---- samples -------------------------------------------------------------------------------------

def test_samples_load_and_tokenize(tok):
    samples = load_samples()
    assert len(samples) == 28 and len({s.id for s in samples}) == 28
    per = Counter((s.model, s.task) for s in samples)
    assert per[("lecture-decoder", "retrieval")] == 4 and per[("lecture-encoder", "brackets")] == 4
    assert per[("lecture-encdec", "translation")] == 4 and per[("lecture-decoder", "story")] == 1  # the lecture's own
    assert all(3 <= n <= 4 for (_, task), n in per.items() if task != "story")
    assert [s.id for s in load_samples("decoder")] == [s.id for s in load_samples("lecture-decoder")]
    assert {s.task for s in load_samples("encoder")} == {"retrieval", "induction", "agreement", "brackets"}
    assert validate_samples() == []
    for s in samples:
        assert s.note and s.title
        assert not unknown_words(s.text, tok) and not unknown_words(s.src_text or "", tok)
        toks = tok.encode(s.text).tokens
        if s.task != "translation":
            assert s.answer in tok.get_vocab() and s.query_index < len(toks)
    first = next(s for s in load_samples("decoder", "retrieval") if s.id == "decoder-retrieval-1")
    toks = tok.encode(first.text).tokens
    assert (first.answer, toks[first.source_index], toks[first.query_index]) == ("eleven", "eleven", "?")
    assert first.get("text") == first.text and first.get("src_text") is None and first.get("nope", 1) == 1
    t1 = load_samples("encdec")[0]
    assert t1.src_text == "the big red dog sees a cat ." and t1.alignment[1] == (2, 4)


def test_validation_catches_broken_samples():
    good = next(s for s in load_samples("decoder", "retrieval") if s.id == "decoder-retrieval-1")
    bad = [dataclasses.replace(good, id="a", source_index=good.source_index - 1),
           dataclasses.replace(good, id="b", text=good.text.replace("alvo ?", "zorba ?")),
           dataclasses.replace(good, id="c", model="lecture-encdec"),
           dataclasses.replace(load_samples("encdec")[0], id="d", text="ka vasko grano roda na miru vidu ."),
           dataclasses.replace(load_samples("encoder", "brackets")[0], id="e", answer="]"),
           Sample("f", "lecture-encoder", "agreement", "t", "the dogs [MASK] happy . [MASK]", "n", "are", 3, 2)]
    problems = validate_samples(bad)
    assert [p.split(":")[0] for p in problems] == ["a", "b", "c", "d", "e", "f"]
    assert "ground truth is answer 'eleven' at 29" in problems[0] and "zorba" in problems[1]
