"""attnlab.model.masks: every mask kind as a truth table, cached rows aligned bottom-right, key padding per key."""

import numpy as np
import pytest
import torch
from attnlab.model.masks import BIDIRECTIONAL, CAUSAL, MaskSpec, build_mask, mask_array, pair_mask
from attnlab.model.softmax import masked_softmax


def table(spec: MaskSpec, T: int, q_len: int | None = None, q_offset: int | None = None) -> np.ndarray:
    """bool [q, T]; queries at the bottom-right by default (a cached step's rows)."""
    q_len = T if q_len is None else q_len
    q_offset = T - q_len if q_offset is None else q_offset
    m = pair_mask(spec, q_len, T, q_offset)
    return np.ones((q_len, T), bool) if m is None else m.numpy()


def causal(T, **kw):
    return table(CAUSAL, T, **kw)


def window(T, w, **kw):
    return table(MaskSpec("sliding_window", window=w), T, **kw)


def test_causal_and_bidirectional():
    np.testing.assert_array_equal(causal(4), np.tril(np.ones((4, 4), bool)))
    assert table(BIDIRECTIONAL, 3).all() and table(BIDIRECTIONAL, 3).shape == (3, 3)
    assert table(BIDIRECTIONAL, 5, q_len=2).shape == (2, 5)


def test_query_offset_lines_cached_rows_up_bottom_right():
    np.testing.assert_array_equal(causal(6, q_len=2), causal(6)[4:])
    np.testing.assert_array_equal(causal(5, q_len=1), [[True] * 5])
    np.testing.assert_array_equal(causal(5, q_len=2, q_offset=1), causal(5)[1:3])
    np.testing.assert_array_equal(window(6, 2, q_len=1), window(6, 2)[5:])


def test_sliding_window():
    want = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    np.testing.assert_array_equal(window(5, 2), np.array(want, bool))
    np.testing.assert_array_equal(window(5, 1), np.eye(5, dtype=bool))
    np.testing.assert_array_equal(window(5, 5), causal(5))
    with pytest.raises(ValueError, match="window ≥ 1"):
        MaskSpec("sliding_window", window=0)


def test_prefix_lm():
    want = [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    np.testing.assert_array_equal(table(MaskSpec("prefix_lm", prefix=2), 4), np.array(want, bool))
    np.testing.assert_array_equal(table(MaskSpec("prefix_lm", prefix=0), 4), causal(4))
    np.testing.assert_array_equal(table(MaskSpec("prefix_lm", prefix=4), 4), table(BIDIRECTIONAL, 4))


def test_key_padding_is_per_key_not_per_pair():
    keys = torch.tensor([[True, True, False, False], [True, True, True, False]])  # [B=2, k=4]
    m = build_mask(BIDIRECTIONAL, 4, 4, key_padding=keys)[:, 0].numpy()  # [B, q, k]
    assert m.shape == (2, 4, 4)
    np.testing.assert_array_equal(m[0], np.tile([True, True, False, False], (4, 1)))
    np.testing.assert_array_equal(m[1], np.tile([True, True, True, False], (4, 1)))
    both = build_mask(CAUSAL, 4, 4, key_padding=keys[:1])[0, 0].numpy()
    np.testing.assert_array_equal(both, causal(4) & [True, True, False, False])
    # the per-pair mistake hides every key from padded queries: fully masked rows
    valid = np.arange(4) < 2
    per_pair = valid[:, None] & valid[None, :]
    assert not per_pair[3].any() and m[0][3].any()
    p = masked_softmax(np.zeros((4, 4)), per_pair)
    assert (p[3] == 0).all() and not np.isnan(p).any()


def test_custom_validates():
    c = torch.tensor([[True, False], [True, True]])
    np.testing.assert_array_equal(table(MaskSpec("custom", custom=c), 2), causal(2))
    with pytest.raises(ValueError, match="bool tensor"):
        MaskSpec("custom", custom=torch.ones(2, 2))
    with pytest.raises(ValueError, match="bool tensor"):
        MaskSpec("custom", custom=torch.ones(1, 2, 2, dtype=torch.bool))


def test_mask_array_padding_hides_keys_from_every_query():
    m = mask_array(BIDIRECTIONAL, 4, real_keys=3)
    np.testing.assert_array_equal(m, np.tile([True, True, True, False], (4, 1)))
    np.testing.assert_array_equal(mask_array(CAUSAL, 3), np.tril(np.ones((3, 3), bool)))
    np.testing.assert_array_equal(mask_array(CAUSAL, 3, real_keys=2), np.tril(np.ones((3, 3), bool)) & [1, 1, 0])
