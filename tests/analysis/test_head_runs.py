import numpy as np
import pytest
import torch
from attnlab.analysis.probes.head_table import (
    COLUMNS,
    collect_patterns,
    cross_head_statistics,
    leading_specials,
    model_head_statistics,
    repeated_random_inputs,
    special_ids,
)
from attnlab.model.inputs import InputError
from attnlab.model.tokenizer import HFTokenizer


def test_repeated_sequence_is_bos_then_two_identical_random_periods(decoder):
    rep = repeated_random_inputs(decoder, period=12, seed=3)
    ids = rep.inputs.ids[0].tolist()
    assert rep.start == 1 and ids[0] == decoder.tokenizer.bos_id and len(ids) == 1 + 24
    body = ids[1:13]
    assert ids[13:] == body
    assert len(set(body)) == 12  # drawn without replacement: the only earlier copy is P back
    assert not set(body) & special_ids(decoder.tokenizer) and max(body) < 256
    assert repeated_random_inputs(decoder, period=12, seed=3).inputs.ids.equal(rep.inputs.ids)
    assert not repeated_random_inputs(decoder, period=12, seed=4).inputs.ids.equal(rep.inputs.ids)
    with pytest.raises(InputError):
        repeated_random_inputs(decoder, period=200)


def test_encdec_repeats_both_sides(encdec):
    rep = repeated_random_inputs(encdec, period=10)
    src = rep.inputs.src_ids[0].tolist()
    assert rep.src_start == 0 and src[:10] == src[10:]  # the source tokenizer adds no BOS
    tgt = rep.inputs.ids[0].tolist()
    assert rep.start == 1 and tgt[1:11] == tgt[11:]


def test_lecture_tokenizer_specials():
    from attnlab.model.lecture.tokenizer import build_tokenizer

    tok = HFTokenizer(build_tokenizer(), bos="[BOS]", eos="[EOS]", pad="[PAD]", mask="[MASK]")
    assert special_ids(tok) == {0, 1, 2, 3, 4, 5}  # [UNK] and [SEP] too: added special tokens
    assert leading_specials(tok) == [2]


def test_table_covers_every_stack_with_values_in_range(encdec):
    inp = encdec.encode("the cat", "le chat")
    df = model_head_statistics(encdec, inp, period=8)
    assert list(df.columns) == list(COLUMNS)
    assert df["stack"].tolist() == ["encoder"] * 8 + ["decoder"] * 8 + ["cross"] * 8
    assert df.loc[df["stack"] == "cross", "site"].iloc[-1] == "decoder.blocks.1.cross_attn"
    self_rows = df[df["stack"] != "cross"]
    for c in ("max_weight", "sink_mass", "diagonal_mass", "prev_token", "duplicate_token", "induction"):
        assert self_rows[c].between(0, 1).all(), c
    assert (df["entropy"] >= 0).all() and df["max_weight"].between(0, 1).all()
    cross = df[df["stack"] == "cross"]
    for c in ("mean_distance", "diagonal_mass", "prev_token", "duplicate_token", "induction"):
        assert cross[c].isna().all(), c
    assert cross[["entropy", "max_weight", "sink_mass"]].notna().all().all()


def test_patterns_match_the_capture(decoder):
    inp = decoder.encode("abcabc")
    cap = decoder.forward(inp).capture
    pats = collect_patterns(cap)
    assert set(pats) == {"decoder"} and pats["decoder"].shape == (2, 4, 7, 7)
    np.testing.assert_array_equal(pats["decoder"][1], cap["blocks.1.attn"].pattern())
    df = model_head_statistics(decoder, inp, repeated=False)
    assert df["induction"].isna().all() and len(df) == 8


def stripe_head(head, offset_from_period, period, start):
    """Intervention: on the repeated run (T = start + 2P) head `head` of the pattern attends one-hot from
    row i ≥ start + P to i − P + offset_from_period; other rows to themselves. Other runs untouched."""

    def fn(x, name):
        t = x.shape[-1]
        if t != start + 2 * period:
            return x
        one_hot = torch.eye(t, dtype=x.dtype)
        for i in range(start + period, t):
            one_hot[i] = 0
            one_hot[i, i - period + offset_from_period] = 1
        x = x.clone()
        x[:, head] = one_hot
        return x

    return fn


def test_a_hand_built_induction_head_and_duplicate_head_score_one(decoder):
    p = 9
    iv = {"blocks.1.attn.hook_pattern": stripe_head(2, 1, p, 1),  # induction: i -> i − P + 1
          "blocks.0.attn.hook_pattern": stripe_head(0, 0, p, 1)}  # duplicate: i -> i − P
    df = model_head_statistics(decoder, decoder.encode("hello"), period=p, interventions=iv).set_index(["layer", "head"])
    assert df.loc[(1, 2), "induction"] == 1.0 and df.loc[(1, 2), "duplicate_token"] == 0.0
    assert df.loc[(0, 0), "duplicate_token"] == 1.0 and df.loc[(0, 0), "induction"] == 0.0
    assert df.loc[(1, 2), "label"] == "induction" and df.loc[(0, 0), "label"] == "duplicate-token"
    others = df.drop(index=[(1, 2), (0, 0)])
    assert (others["induction"] < 0.2).all()


def test_cross_statistics_by_hand():
    a = np.zeros((1, 2, 3, 4))
    a[0, 0, :, 0] = 1  # every target row on the first source token
    a[0, 1] = 0.25  # uniform
    df = cross_head_statistics(a)
    np.testing.assert_allclose(df["entropy"], [0, np.log(4)], atol=1e-12)
    np.testing.assert_allclose(df["max_weight"], [1, 0.25])
    np.testing.assert_allclose(df["sink_mass"], [1, 0.25])
    assert df["label"].tolist() == ["sink", "broad/uniform"]


def test_a_repeated_sequence_fits_the_context_the_model_has_here():
    """random-long-decoder reads 4,096 tokens on the CPU (cfg.max_len 32,768): a period of 3,000 (6,001 tokens) is
    refused against 4,096, as every other input on this machine, instead of passing a check against 32,768."""
    from attnlab.model.registry import load

    lm = load("random-long-decoder")
    with pytest.raises(InputError) as e:
        repeated_random_inputs(lm, 3000)
    assert str(e.value).endswith("≤ 4096") and "gives 6001 tokens" in str(e.value)
    assert repeated_random_inputs(lm, 2047).inputs.ids.shape == (1, 4095)
