import numpy as np
import pytest
from attnlab.analysis.attention.head_stats import (
    duplicate_token_score,
    head_metrics,
    head_statistics,
    induction_score,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def causal(t: int) -> np.ndarray:
    return np.tril(np.ones((t, t), dtype=bool))  # bool [t, t], True = may attend


PREV = np.array([[1.0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])  # one-hot previous-token head
UNIFORM = np.full((4, 4), 0.25)


def stripe_pattern(t, offset, start=0, period=3):
    """One-hot rows: i ≥ start + period attends to i − offset, earlier rows to themselves."""
    a = np.eye(t)
    for i in range(start + period, t):
        a[i] = 0
        a[i, i - offset] = 1
    return a


def test_uniform_rows():
    m = head_metrics(UNIFORM[None, None])
    assert m["entropy"][0, 0] == pytest.approx(np.log(4))
    assert m["max_weight"][0, 0] == m["sink_mass"][0, 0] == m["diagonal_mass"][0, 0] == m["prev_token"][0, 0] == 0.25
    # Σ_k |q − k| / 4 for q = 0..3: 1.5, 1, 1, 1.5
    assert m["mean_distance"][0, 0] == pytest.approx(1.25)


def test_one_hot_previous_token_head():
    m = head_metrics(PREV[None, None], causal(4))
    assert m["entropy"][0, 0] == 0 and m["max_weight"][0, 0] == 1 and m["prev_token"][0, 0] == 1
    assert m["sink_mass"][0, 0] == 0.5  # rows 0 and 1 of 4
    assert m["diagonal_mass"][0, 0] == 0.25  # row 0 only
    assert m["mean_distance"][0, 0] == 0.75  # distances 0, 1, 1, 1


def test_causal_uniform_entropy_and_labels():
    cu = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    p = np.stack([PREV, cu, np.eye(4), np.tile([1.0, 0, 0, 0], (4, 1))])[None]  # [1, 4, 4, 4]
    df = head_statistics(p, causal(4))
    assert df.loc[1, "entropy"] == pytest.approx(np.log(24) / 4)  # mean of ln 1, ln 2, ln 3, ln 4
    assert list(df["label"]) == ["previous-token", "broad/uniform", "self/diagonal", "sink"]


def test_duplicate_and_induction_scores_on_a_repeated_sequence():
    p, t = 3, 6
    dup, ind = stripe_pattern(t, p), stripe_pattern(t, p - 1)
    both = np.stack([dup, ind, (dup + ind) / 2])  # [3, 6, 6]
    np.testing.assert_allclose(duplicate_token_score(both, p), [1, 0, 0.5])
    np.testing.assert_allclose(induction_score(both, p), [0, 1, 0.5])
    # with a BOS at position 0 the repeats start at 1
    bos = stripe_pattern(7, p - 1, start=1)
    assert induction_score(bos, p, start=1) == 1 and induction_score(bos, p) == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="period"):
        induction_score(both, 6)


def test_head_statistics_frame():
    p, t = 3, 6
    rep = np.stack([stripe_pattern(t, p), stripe_pattern(t, p - 1)])[None]  # [1, 2, 6, 6]: dup, induction
    df = head_statistics(np.stack([UNIFORM, UNIFORM])[None], stack="encoder", repeat_patterns=rep, period=p)
    assert list(df.columns) == ["stack", "layer", "head", "entropy", "max_weight", "mean_distance", "sink_mass",
                                "diagonal_mass", "prev_token", "duplicate_token", "induction", "label"]
    assert list(df["stack"]) == ["encoder"] * 2 and list(df["head"]) == [0, 1]
    assert list(df["duplicate_token"]) == [1, 0] and list(df["induction"]) == [0, 1]
    assert list(df["label"]) == ["duplicate-token", "induction"]
    plain = head_statistics(np.stack([UNIFORM] * 3)[:, None])  # [3, 1, 4, 4]
    assert list(plain["layer"]) == [0, 1, 2] and plain["induction"].isna().all()
    assert list(plain["label"]) == ["broad/uniform"] * 3
    with pytest.raises(ValueError, match="repeat_patterns"):
        head_statistics(np.stack([UNIFORM] * 3)[:, None], repeat_patterns=rep, period=p)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), layers=st.integers(1, 3), heads=st.integers(1, 3), t=st.integers(2, 9),
       peak=st.floats(0, 8), is_causal=st.booleans())
def test_statistics_stay_in_range(seed, layers, heads, t, peak, is_causal):
    x = np.random.default_rng(seed).normal(size=(layers, heads, t, t)) * peak
    mask = causal(t) if is_causal else None
    if is_causal:
        x = np.where(mask, x, -np.inf)
    a = np.exp(x - x.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    m = head_metrics(a, mask)
    eps = 1e-12
    assert ((m["entropy"] >= -eps) & (m["entropy"] <= np.log(t) + eps)).all()
    assert ((m["max_weight"] >= 1 / t - eps) & (m["max_weight"] <= 1 + eps)).all()
    # min-entropy ≤ Shannon entropy per row, so the mean row max ≥ exp(−mean entropy) (Jensen)
    assert (m["max_weight"] >= np.exp(-m["entropy"]) - 1e-9).all()
    assert ((m["mean_distance"] >= 0) & (m["mean_distance"] <= t - 1)).all()
    for s in ("sink_mass", "diagonal_mass", "prev_token"):
        assert ((m[s] >= 0) & (m[s] <= 1 + eps)).all()
    if t >= 4:
        d, i = duplicate_token_score(a, t // 2), induction_score(a, t // 2)
        assert ((d >= 0) & (d <= 1 + eps) & (i >= 0) & (i <= 1 + eps)).all()
