import numpy as np
import pytest
from attnlab.analysis.attention.pooling import pool_matrix, window


def test_pool_4x4_into_2x2_by_hand():
    m = np.arange(16.0).reshape(4, 4)
    pooled, qe, ke = pool_matrix(m, max_cells=2)
    np.testing.assert_array_equal(pooled, [[5, 7], [13, 15]])
    np.testing.assert_array_equal(pool_matrix(m, 2, "mean")[0], [[2.5, 4.5], [10.5, 12.5]])
    np.testing.assert_array_equal(qe, [0, 2, 4])
    np.testing.assert_array_equal(ke, [0, 2, 4])


def test_uneven_blocks_and_edges():
    m = np.arange(15.0).reshape(5, 3)
    pooled, qe, ke = pool_matrix(m, max_cells=2, how="mean")  # blocks of ceil(5/2) = 3 rows, 2 columns
    np.testing.assert_array_equal(qe, [0, 3, 5])
    np.testing.assert_array_equal(ke, [0, 2, 3])
    # rows 0-2 × cols 0-1: 0,1,3,4,6,7 -> 3.5; rows 0-2 × col 2: 2,5,8 -> 5; rows 3-4 × cols 0-1: 9,10,12,13
    np.testing.assert_array_equal(pooled, [[3.5, 5], [11, 12.5]])


def test_nan_is_ignored_and_an_all_nan_block_stays_nan():
    n = np.nan
    m = np.array([[1.0, n, n, n], [n, 3, n, n], [5, 5, 6, n], [5, 5, n, n]])
    mx, _, _ = pool_matrix(m, 2, "max")
    mean, _, _ = pool_matrix(m, 2, "mean")
    np.testing.assert_array_equal(mx, [[3, n], [5, 6]])
    np.testing.assert_array_equal(mean, [[2, n], [5, 6]])


def test_pooling_equals_pooling_the_full_matrix_by_hand():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(10, 7))
    m[rng.random((10, 7)) < 0.3] = np.nan
    for how, f in (("max", np.nanmax), ("mean", np.nanmean)):
        pooled, qe, ke = pool_matrix(m, max_cells=3, how=how)  # blocks 4 × 3
        assert pooled.shape == (3, 3)
        for i in range(3):
            for j in range(3):
                block = m[qe[i]:qe[i + 1], ke[j]:ke[j + 1]]
                want = f(block) if not np.isnan(block).all() else np.nan
                np.testing.assert_allclose(pooled[i, j], want)


def test_large_matrices_fit_in_max_cells_and_small_ones_pass_through():
    pooled, qe, ke = pool_matrix(np.zeros((1030, 100), np.float32), max_cells=512)
    assert pooled.shape == (344, 100) and qe[1] == 3 and qe[-1] == 1030 and pooled.dtype == np.float32
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(pool_matrix(m)[0], m)
    with pytest.raises(ValueError, match="how"):
        pool_matrix(m, how="median")


def test_window():
    m = np.arange(20).reshape(4, 5)
    np.testing.assert_array_equal(window(m, 1, 3, 2, 4), [[7, 8], [12, 13]])
    with pytest.raises(ValueError, match="window"):
        window(m, 3, 3, 0, 1)
    with pytest.raises(ValueError, match="window"):
        window(m, 0, 5, 0, 1)
