"""Every number a lecture preset's note states is recomputed from the bundled model: "head L.H puts P% on it" (the
query row's weight on the source token), "puts P% of this row on 'w'" / "puts P% on 'w'" (on that word), "the
bundled decoder answers 'x' (P%)". A retrained model whose attention or answers moved fails here until the notes
follow it. The worked examples' notes on lecture-decoder are written from the measurement itself
(app/interp_notes.py), so they cannot go stale; that is checked too."""

from __future__ import annotations

import re

import numpy as np
import pytest
from attnlab.app.interp_examples import RETRIEVAL
from attnlab.app.interp_notes import lens_note, patch_note
from attnlab.app.presets import default_query, presets, source_index
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page

CLAIM = re.compile(r"head (\d+)\.(\d+) puts (\d+)% (?:of this row )?on (it|'[^']+')")
ANSWER = re.compile(r"the bundled \w+ answers '([^']+)' \((\d+)%\)")
MODELS = ("lecture-decoder", "lecture-encoder")


def within(share: float, pct: str) -> bool:
    """A share as the note rounds it: 0.996 reads '100', 0.985 '98' or '99'."""
    return abs(100 * share - int(pct)) <= 0.5 + 1e-6


def cases():
    return [(m, p) for m in MODELS for p in presets(m) if CLAIM.search(p.note)]


@pytest.fixture(scope="module")
def models():
    return {m: load(m) for m in MODELS}


@pytest.mark.parametrize("model, p", cases(), ids=lambda x: getattr(x, "id", x))
def test_every_number_in_a_presets_note_is_what_the_model_does(model, p, models):
    run = models[model].run(p.text, p.src_text)
    stack = run.matrices(next(iter(run.groups())))  # [L, H, T, T]
    q = default_query(run, p)
    claims = CLAIM.findall(p.note)
    assert claims, p.note
    for layer, head, pct, target in claims:
        row = stack[int(layer), int(head), q]  # [T]
        if target == "it":
            src = source_index(run, p)
            share = float(row[src])
        else:  # the word's occurrence this head reads most
            word = target.strip("'")
            at = [i for i, t in enumerate(run.tokens) if t.lower() == word]
            assert at, (word, run.tokens)
            share = float(max(row[i] for i in at))
        assert within(share, pct), (p.id, f"head {layer}.{head}", target, f"{100 * share:.2f}% vs {pct}%")
    (answer, prob), = ANSWER.findall(p.note)
    assert run.top_tokens[q][0] == answer and within(float(run.top_probs[q][0]), prob), \
        (p.id, run.top_tokens[q][0], float(run.top_probs[q][0]), answer, prob)


def test_the_claim_pattern_reads_every_decoder_and_encoder_preset():
    ids = {p.id for _, p in cases()}
    assert len(ids) == 24 and "decoder-story-1" in ids  # all but the four translations (cross-attention notes)
    story = next(p for m, p in cases() if p.id == "decoder-story-1")
    assert [c[3] for c in CLAIM.findall(story.note)] == ["'alex'", "'mary'", "'48'"]


@pytest.fixture(scope="module")
def measured():
    from attnlab.app import state

    ex = RETRIEVAL
    pt = state.patching(ex.model, ex.clean, ex.corrupt, ex.answer, ex.wrong)
    lens = state.logit_lens(ex.model, ex.clean, ex.answer)
    dla = state.logit_attribution(ex.model, ex.clean, ex.answer, ex.wrong)
    return pt, lens, dla


def test_the_patching_note_is_written_from_the_measurement(measured):
    pt, _, _ = measured
    note = patch_note(pt)
    assert f"{pt.ld_clean:+.2f} on the clean story and {pt.ld_corrupt:+.2f} with" in note
    layer, head = np.unravel_index(int(np.argmax(pt.heads)), pt.heads.shape)
    assert f"layer {layer} head {head} restores {100 * pt.heads[layer, head]:.0f} %" in note
    for lay, h in zip(*np.nonzero(pt.heads < -0.1)):
        assert f"layer {lay} head {h} ({100 * pt.heads[lay, h]:.0f} %)" in note  # the heads that work against it
    assert "−11.88" not in note and "52, 31, 24, 12" not in note  # the numbers of the model before retraining


def test_the_lens_note_is_written_from_the_measurement(measured):
    _, lens, dla = measured
    note = lens_note(lens, dla)
    probs = lens.answer_probs[:, -1]
    assert f"{lens.rows[-1]} {probs[-1]:.3f}" in note and f"({dla.logit:.2f})" in note
    parts = [(f"layer {i} head {h}", v) for (i, h), v in np.ndenumerate(dla.heads)]
    top = max(parts + [(f"layer {i} MLP", v) for i, v in enumerate(dla.mlps)], key=lambda kv: kv[1])
    assert f"the largest writers are {top[0]} ({top[1]:+.2f})" in note


def test_the_pages_show_the_measured_notes(measured):
    pt, lens, dla = measured
    at = open_page("patching", pt_example="retrieval")
    ok(at)
    assert any(patch_note(pt) == i.value for i in at.info)
    at = open_page("lens", model=RETRIEVAL.model, preset="custom", text=RETRIEVAL.clean)
    ok(at)
    assert any(lens_note(lens, dla) == i.value for i in at.info)
