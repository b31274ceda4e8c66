import numpy as np
from attnlab.analysis.attention.masks import zero_after_softmax_vs_neg_inf


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
