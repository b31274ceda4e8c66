import numpy as np
import pytest
from attnlab.analysis.attention.scores import (
    check_patterns,
    counterfactual_softmax,
    effective_keys,
    row_entropy,
    saturation,
    score_stats,
)
from attnlab.model.softmax import masked_softmax

LN3 = np.log(3)


def test_masked_softmax_by_hand_with_exact_zeros_and_empty_rows():
    x = np.array([[0, LN3, 7.0], [1.0, 2, 3], [5.0, 5, 5]])
    mask = np.array([[True, True, False], [False, False, False], [True, True, True]])
    with np.errstate(invalid="raise", divide="raise"):  # no −inf − (−inf) on the empty row
        p = masked_softmax(x, mask)
    np.testing.assert_allclose(p[0], [0.25, 0.75, 0])
    assert p[0, 2] == 0 and (p[1] == 0).all() and not np.isnan(p).any()
    np.testing.assert_allclose(p[2], [1 / 3] * 3)
    with pytest.raises(ValueError, match="finite"):
        masked_softmax(np.array([[0.0, -np.inf]]))  # −inf baked into the scores, no mask
    np.testing.assert_array_equal(masked_softmax(np.array([[0.0, -np.inf]]), [[True, False]]), [[1, 0]])


def test_entropy_of_uniform_and_one_hot_rows():
    p = np.array([[0.25] * 4, [0, 1.0, 0, 0], [0.5, 0.5, 0, 0]])
    np.testing.assert_allclose(row_entropy(p), [np.log(4), 0, np.log(2)])
    mask = np.array([[True] * 4, [True] * 4, [True, True, True, False]])
    np.testing.assert_allclose(effective_keys(p, mask), [4, 1, 2])
    assert np.isnan(effective_keys(np.zeros((1, 3)), [[False] * 3])).all()


def test_saturation_counts_valid_rows_above_each_threshold():
    p = np.array([[0.95, 0.05], [0.995, 0.005], [0.5, 0.5], [0, 0]])  # last row fully masked
    np.testing.assert_allclose(saturation(p), [2 / 3, 1 / 3])
    np.testing.assert_allclose(saturation(p[None].repeat(2, 0), thresholds=(0.4,)), [[1], [1]])


def test_score_stats_exclude_masked_entries():
    raw = np.array([[[1.0, 50], [3, 5]]])  # [H=1, 2, 2]; 50 is masked
    mask = np.array([[True, False], [True, True]])
    df = score_stats({"blocks.0.attn": raw}, 0.5, mask)
    row = df.iloc[0]
    assert row["site"] == "blocks.0.attn" and row["head"] == 0
    assert (row["raw_mean"], row["raw_min"], row["raw_max"]) == (3, 1, 5)
    assert row["raw_std"] == pytest.approx(np.sqrt(8 / 3))
    assert (row["scaled_mean"], row["scaled_min"], row["scaled_max"]) == (1.5, 0.5, 2.5)
    assert row["scaled_std"] == pytest.approx(np.sqrt(8 / 3) / 2)
    # a [L, H, q, k] array with a per-layer scale and a bias
    both = score_stats(np.stack([raw, raw]), [1.0, 2.0], mask, bias=1.0)
    assert list(both["site"]) == [0, 1] and list(both["scaled_max"]) == [6, 11]


def test_counterfactual_without_the_scale_collapses_entropy():
    raw = np.array([[0, 2 * LN3]])
    cf = counterfactual_softmax(raw, 0.5)
    np.testing.assert_allclose(cf.scaled, [[0.25, 0.75]])
    np.testing.assert_allclose(cf.unscaled, [[0.1, 0.9]])
    assert cf.unscaled_entropy[0] < cf.scaled_entropy[0]
    np.testing.assert_allclose(counterfactual_softmax(raw, 0.5, tau=2.0).unscaled, [[0.25, 0.75]])
    # q, k with unit-variance entries and d_k = 64: unscaled logits have std 8, so rows nearly one-hot
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(32, 64)), rng.normal(size=(32, 64))
    cf = counterfactual_softmax(q @ k.T, 1 / 8)
    assert cf.unscaled_entropy.mean() < 0.5 * cf.scaled_entropy.mean()
    with pytest.raises(ValueError, match="tau"):
        counterfactual_softmax(raw, 0.5, tau=0)


def test_check_patterns_accepts_fully_masked_rows():
    a = check_patterns(np.array([[0.5, 0.5], [0, 0]], dtype=np.float32))
    assert a.dtype == np.float32
    with pytest.raises(ValueError, match="sum to 1"):
        check_patterns(np.array([[0.5, 0.6]]))
