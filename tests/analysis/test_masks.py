import numpy as np
import pytest

from analysis.masks import (
    bidirectional,
    causal,
    custom,
    mask_study,
    padding,
    prefix_lm,
    sliding_window,
    zero_after_softmax_vs_neg_inf,
)
from model.softmax import masked_softmax


def test_causal_and_bidirectional():
    np.testing.assert_array_equal(causal(4), np.tril(np.ones((4, 4), bool)))
    assert bidirectional(3).all() and bidirectional(3).shape == (3, 3)
    assert bidirectional(5, q_len=2).shape == (2, 5)


def test_query_offset_lines_cached_rows_up_bottom_right():
    np.testing.assert_array_equal(causal(6, q_len=2), causal(6)[4:])
    np.testing.assert_array_equal(causal(5, q_len=1), [[True] * 5])
    np.testing.assert_array_equal(causal(5, q_len=2, q_offset=1), causal(5)[1:3])
    np.testing.assert_array_equal(sliding_window(6, 2, q_len=1), sliding_window(6, 2)[5:])
    with pytest.raises(ValueError, match="q_offset"):
        causal(4, q_offset=-1)


def test_sliding_window():
    want = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    np.testing.assert_array_equal(sliding_window(5, 2), np.array(want, bool))
    np.testing.assert_array_equal(sliding_window(5, 1), np.eye(5, dtype=bool))
    np.testing.assert_array_equal(sliding_window(5, 5), causal(5))
    with pytest.raises(ValueError, match="w must be"):
        sliding_window(5, 0)


def test_prefix_lm():
    want = [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    np.testing.assert_array_equal(prefix_lm(4, 2), np.array(want, bool))
    np.testing.assert_array_equal(prefix_lm(4, 0), causal(4))
    np.testing.assert_array_equal(prefix_lm(4, 4), bidirectional(4))


def test_padding_is_per_key_not_per_pair():
    m = padding([2, 3], 4)  # [B=2, q=4, k=4]
    assert m.shape == (2, 4, 4)
    np.testing.assert_array_equal(m[0], np.tile([True, True, False, False], (4, 1)))
    np.testing.assert_array_equal(m[1], np.tile([True, True, True, False], (4, 1)))
    np.testing.assert_array_equal(padding(np.array([False, True, True])), np.tile([False, True, True], (3, 1)))
    # the per-pair mistake hides every key from padded queries: fully masked rows
    valid = np.arange(4) < 2
    per_pair = valid[:, None] & valid[None, :]
    assert not per_pair[3].any() and m[0][3].any()
    p = masked_softmax(np.zeros((4, 4)), per_pair)
    assert (p[3] == 0).all() and not np.isnan(p).any()
    with pytest.raises(ValueError, match="needs T"):
        padding(3)
    with pytest.raises(ValueError, match="lengths"):
        padding([5], 4)


def test_custom_validates():
    np.testing.assert_array_equal(custom([[1, 0], [1, 1]]), causal(2))
    with pytest.raises(ValueError, match="0 and 1"):
        custom([[2, 0], [1, 1]])
    with pytest.raises(ValueError, match="2-D"):
        custom(np.ones((1, 2, 2), bool))


def test_mask_study_causal_vs_bidirectional_by_hand():
    h, t = 2, 3
    q = k = np.zeros((h, t, 4))  # equal scores: uniform over visible keys
    v = np.broadcast_to(np.eye(t), (h, t, t))  # output row = pattern row
    s = mask_study(q, k, v, causal(t), bidirectional(t))
    # row 0: [1, 0, 0] vs [1/3, 1/3, 1/3]
    np.testing.assert_allclose(s.max_dpattern, [2 / 3] * h)
    np.testing.assert_allclose(s.max_doutput, [2 / 3] * h)
    np.testing.assert_allclose(s.pattern_a[0, 2], s.pattern_b[0, 2])  # the last row sees all keys either way
    same = mask_study(q, k, v, causal(t), causal(t))
    assert (same.max_dpattern == 0).all() and (same.max_doutput == 0).all()


def test_zero_after_softmax_vs_neg_inf():
    scores = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = np.array([[True, True, False], [True, True, True], [False, False, False]])
    z = zero_after_softmax_vs_neg_inf(scores, mask)
    np.testing.assert_allclose(z.zero_after[0], [1 / 3, 1 / 3, 0])
    np.testing.assert_allclose(z.zero_renorm[0], [0.5, 0.5, 0])
    np.testing.assert_allclose(z.zero_renorm, z.neg_inf, atol=1e-15)
    assert z.zero_after[0].sum() < 1 and (z.zero_after[2] == 0).all() and (z.neg_inf[2] == 0).all()
    rng = np.random.default_rng(1)
    s, m = rng.normal(size=(5, 6)) * 4, rng.random((5, 6)) < 0.5
    z = zero_after_softmax_vs_neg_inf(s, m)
    np.testing.assert_allclose(z.zero_renorm, z.neg_inf, atol=1e-12)
    partial = m.any(-1) & ~m.all(-1)
    assert partial.any() and (z.zero_after.sum(-1)[partial] < 1).all()
