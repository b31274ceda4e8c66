"""The first lecture's story on a model: what it answers after the story's last token, and where that row's
attention goes on the story's facts (Mary, her age, John's age, the cats' ages).

`story_answer` runs the model once with capture (eager) and greedily continues the text. For each fact it
reports the head whose answer row puts the most weight on the fact's tokens (summed over them) and the mean over
every head, so a lecturer can set SmolLM2 beside lecture-decoder on the same question.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# the story as the first lecture tells it; lecture-decoder reads its own lower-cased preset (decoder-story-1)
STORY = ("Alex has a friend called John. He is 46 years of age. Alex has a best friend named Mary. She is 48 years "
         "young. Alex has a bunch of orange cats who bully him. They are 2 or 3 years old. How old is the best friend "
         "of Alex? The age of his best friend is")
FACTS = (("Mary, the best friend", ("mary",)), ("her age, 48 (the answer)", ("48",)),
         ("John's age, 46", ("46",)), ("the cats' ages, 2 or 3", ("2", "3")))
TOP = 5


def find_word(tokens: list[str], word: str) -> list[int]:
    """Positions of every run of consecutive tokens that spells `word` (case and leading spaces ignored): '48' is
    one token for lecture-decoder and '4', '8' for SmolLM2, whose digits are split."""
    clean = [t.replace("␣", " ").strip().lower() for t in tokens]
    found = []
    for i, c in enumerate(clean):
        if not c or not word.startswith(c):
            continue
        j, spelled = i, ""
        while j < len(clean) and len(spelled) < len(word) and word.startswith(spelled + clean[j]):
            spelled, j = spelled + clean[j], j + 1
        if spelled == word:
            found += range(i, j)
    return found


@dataclass
class FactRead:
    fact: str
    positions: list[int]  # the fact's tokens in the text
    head: tuple[int, int]  # (layer, head) whose answer row puts the most weight on them
    weight: float  # that head's weight on them, summed
    mean: float  # the same sum, mean over every head


@dataclass
class StoryAnswer:
    tokens: list[str]
    row: int  # the answer row: the last token
    steps: list[list[tuple[str, int, float]]]  # per greedy step: the top TOP (label, id, probability)
    continuation: list[str]  # the greedy continuation, token labels
    facts: list[FactRead]
    n_heads: int  # layers × heads read


def story_answer(lm, inputs, n_new: int = 6, steps: int = 2) -> StoryAnswer:
    """What `lm` answers after `inputs` (greedy, `n_new` tokens; the top TOP of the first `steps` steps) and how
    its last row reads each of FACTS."""
    run = lm.run(inputs=inputs, backend="eager")
    pats = run.matrices("self")  # [L, H, T, T]
    q = len(run.tokens) - 1
    logs: list[torch.Tensor] = []
    ids, labels = lm.generate(None, n_new, inputs=inputs, step_logits=logs, stop_at_eos=False)
    top = []
    for logit in logs[:steps]:
        p, i = torch.softmax(logit[0].float(), -1).topk(TOP)  # [TOP]
        top.append([(lm.label(int(j)), int(j), float(v)) for j, v in zip(i, p)])
    facts = []
    for name, words in FACTS:
        pos = sorted({i for w in words for i in find_word(run.tokens[:q + 1], w)})
        w = pats[:, :, q, pos].sum(-1) if pos else np.zeros(pats.shape[:2])  # [L, H]
        layer, head = np.unravel_index(int(np.argmax(w)), w.shape)
        facts.append(FactRead(name, pos, (int(layer), int(head)), float(w[layer, head]), float(w.mean())))
    return StoryAnswer(run.tokens, q, top, labels[len(run.tokens):], facts, int(np.prod(pats.shape[:2])))


def story_note(a: StoryAnswer, lecture: StoryAnswer) -> str:
    """smollm2's preset note on STORY, beside lecture-decoder's answer to its own story; every number measured."""
    first, digit = a.steps[0], a.steps[1]
    mary, age, _, cats = a.facts
    l_mary, l_age = lecture.facts[0], lecture.facts[1]
    return (f"SmolLM2 answers wrongly: it continues {''.join(a.continuation[:5])!r}, the cats' age — first a space "
            f"({repr(first[0][0])} p = {first[0][2]:.2f}), then the digit "
            + ", ".join(f"{repr(t)} {p:.2f}" for t, _, p in digit[:4])
            + f" (Mary's 48 and John's 46 both start with '4'). Its answer row spreads thin: head "
            f"{mary.head[0]}.{mary.head[1]} reads ' Mary' with {mary.weight:.2f}, but no head puts more than "
            f"{age.weight:.2f} on her age '48' (head {age.head[0]}.{age.head[1]}), and head {cats.head[0]}."
            f"{cats.head[1]} puts {cats.weight:.2f} on the cats' '2' and '3'. Beside it, lecture-decoder on its own "
            f"story answers {repr(lecture.steps[0][0][0])} (p = {lecture.steps[0][0][2]:.3f}): head "
            f"{l_mary.head[0]}.{l_mary.head[1]} puts {l_mary.weight:.2f} on 'mary' and head {l_age.head[0]}."
            f"{l_age.head[1]} {l_age.weight:.2f} on '48'")


def story_preset(a: StoryAnswer, lecture: StoryAnswer) -> dict:
    """sample_texts/smollm2.json's entry for STORY (no `answer`: SmolLM2's next token is a space, not a digit)."""
    return {"id": "smollm2-story-1", "model": "smollm2", "task": "story",
            "title": "The first lecture's story: how old is the best friend of Alex? (answered wrongly)",
            "text": STORY, "note": story_note(a, lecture), "answer": None, "query_index": a.row,
            "source_index": a.facts[1].positions[0]}
