"""Activation patching: 100 % when everything is patched, 0 % when nothing changes, the batched staircase equal
to one plain hooked run per cell, the retrieval story's heads, and bad input as one line."""

import numpy as np
import pytest
from attnlab.analysis.probes.patching import _Setup, activation_patching
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.analysis.interp_models import CORRUPT, STORY, tiny_llama


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


@pytest.fixture(scope="module")
def story(lecture):
    return activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle", layers=[0, 1])


def _plain(lm, corrupt, answer, wrong, fixes):
    """The logit difference of one ordinary hooked forward of the corrupted prompt with `fixes` applied."""
    logits = lm.forward(lm.encode(corrupt), interventions=fixes, records=False).logits[0, -1]
    return float(logits[lm.single_token_id(answer)] - logits[lm.single_token_id(wrong)])


def test_everything_restores_100_and_nothing_0(story):
    assert story.all_restored == pytest.approx(1.0, abs=1e-6)
    same = [p for p, (a, b) in enumerate(zip(story.clean, story.corrupt)) if a == b]
    assert len(same) == len(story.clean) - 1  # only "garo" → "hildo" in the question differs
    np.testing.assert_allclose(story.resid[:, same[:-1]][0], 0, atol=1e-6)  # layer 0: identical streams
    assert story.ld_clean > 5 > -5 > story.ld_corrupt


def test_the_staircase_equals_plain_hooked_runs(lecture, story):
    s = _Setup(lecture, STORY, CORRUPT, "rabbit", "turtle", "sdpa")
    gap = s.ld["clean"] - s.ld["corrupt"]
    for layer, pos in [(0, 31), (2, 33), (3, 10)]:
        clean = s.resid["clean"][layer]

        def put(x, name, pos=pos, clean=clean):
            x = x.clone()
            x[:, pos] = clean[:, pos]
            return x

        ld = _plain(lecture, CORRUPT, "rabbit", "turtle", {f"blocks.{layer}.hook_resid_pre": put})
        assert story.resid[layer, pos] == pytest.approx((ld - s.ld["corrupt"]) / gap, abs=1e-5)
    for layer, head, pos in [(1, 0, None), (3, 2, None), (0, 3, 31), (1, 0, 33)]:
        cz = s.z["clean"][layer]

        def put_z(z, name, head=head, pos=pos, cz=cz):
            z = z.clone()
            if pos is None:
                z[:, :, head] = cz[:, :, head]
            else:
                z[:, pos, head] = cz[:, pos, head]
            return z

        ld = _plain(lecture, CORRUPT, "rabbit", "turtle", {f"blocks.{layer}.attn.hook_z": put_z})
        got = story.heads[layer, head] if pos is None else story.head_pos[layer][head, pos]
        assert got == pytest.approx((ld - s.ld["corrupt"]) / gap, abs=1e-5)


def test_the_retrieval_story_heads(story):
    """Measured: layer 0 head 3 at the question's name moves it (0.96), layer 1 head 0 carries it to '?' (1.00)."""
    q = story.clean.index("does") + 1  # the question's name
    assert story.clean[q] == "garo" and story.corrupt[q] == "hildo"
    assert story.resid[0, q] > 0.99 and story.resid[-1, -1] > 0.99
    assert story.heads[1, 0] > 0.9 and story.head_pos[0][3, q] > 0.9 and story.head_pos[1][0, -1] > 0.9
    assert sorted(story.head_pos) == [0, 1] and story.runs["head_pos"] == 2 * 4 * len(story.clean)


def test_gqa_rmsnorm_patching_restores_everything():
    p = activation_patching(tiny_llama(), "hello world", "jello world", "o", "w")
    assert p.all_restored == pytest.approx(1.0, abs=1e-5)
    assert p.resid.shape == (3, 12) and p.heads.shape == (3, 6) and sorted(p.head_pos) == [0, 1, 2]
    np.testing.assert_allclose(p.resid[0, 2:], 0, atol=1e-5)  # only "h" → "j" (position 1) differs at the input


@pytest.mark.parametrize("args, msg", [
    ((STORY, CORRUPT + " x", "rabbit", "turtle"), "equal lengths"),
    ((STORY, CORRUPT, "rabbit hen", "turtle"), "is 2 tokens"),
    ((STORY, CORRUPT, "rabbit", "rabbit"), "the same token"),
    ((STORY, STORY, "rabbit", "turtle"), "same logit difference"),
])
def test_bad_input_is_one_line(lecture, args, msg):
    with pytest.raises(InputError, match=msg) as e:
        activation_patching(lecture, *args)
    assert "\n" not in str(e.value)


def test_layer_out_of_range_and_non_decoders(lecture):
    with pytest.raises(InputError, match="layer 4 is out of range"):
        activation_patching(lecture, STORY, CORRUPT, "rabbit", "turtle", layers=[4])
    with pytest.raises(InputError, match="decoder"):
        activation_patching(load("lecture-encoder"), "a b", "a c", "a", "b")


@pytest.mark.parametrize("family", ["gemma2", "phi", "gpt_neox"])
def test_patching_on_converted_families(tmp_path, family):
    """Alternating windows (Gemma 2), parallel blocks (Phi, NeoX): a run started at a block sees that block's own
    mask, so patching the one differing input position at layer 0 restores the clean answer exactly."""
    from tests.family_grid import TINY, make

    cls, conf = TINY[family]
    lm = load(str(make(tmp_path / family, family, cls, **conf)))
    clean, corrupt = "a b c d e f g", "a b e d e f g"
    ids = lm.encode(clean).ids[0].tolist()
    diff = [i for i, (a, b) in enumerate(zip(ids, lm.encode(corrupt).ids[0].tolist())) if a != b]
    last = lm.forward(lm.encode(clean)).logits[0, -1]
    labels = [lm.label(int(i)) for i in last.argsort(descending=True)]
    answer, wrong = [t for t in labels if t.strip().isalnum() and lm.single_token_id(t) is not None][:2]
    p = activation_patching(lm, clean, corrupt, answer, wrong)
    assert p.all_restored == pytest.approx(1.0, abs=1e-5)
    assert p.resid[0, diff[0]] == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(np.delete(p.resid[0], diff), 0, atol=1e-4)
