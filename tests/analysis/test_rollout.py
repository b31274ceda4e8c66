import numpy as np
import pytest
from attnlab.analysis.attention.rollout import attention_rollout, cross_rollout, discard_smallest, rollout_row
from hypothesis import given, settings
from hypothesis import strategies as st

# previous-token head over 3 tokens (token 0 attends to itself): one-hot rows
SHIFT = np.array([[1.0, 0, 0], [1, 0, 0], [0, 1, 0]])
SWAP = np.array([[0.0, 0, 1], [0, 1, 0], [1, 0, 0]])  # token 0 <-> token 2


def random_patterns(seed, layers, heads, t, causal=True, peak=3.0):
    """Softmax of random scores: [layers, heads, t, t], rows sum to 1, zero above the diagonal if causal."""
    x = np.random.default_rng(seed).normal(size=(layers, heads, t, t)) * peak
    if causal:
        x = np.where(np.tril(np.ones((t, t), bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [0.0, 0.5, 0.9])
def test_identity_patterns_roll_out_to_identity(fusion, residual):
    p = np.broadcast_to(np.eye(5), (3, 2, 5, 5))
    np.testing.assert_array_equal(attention_rollout(p, residual, fusion, discard_ratio=0.5), np.eye(5))


def test_one_hot_previous_token_two_layers():
    p = np.stack([SHIFT, SHIFT])[:, None]  # [2, 1, 3, 3]
    # Â = (I + S)/2: rows [1,0,0], [.5,.5,0], [0,.5,.5]; R = Â·Â
    want = np.array([[1, 0, 0], [0.75, 0.25, 0], [0.25, 0.5, 0.25]])
    np.testing.assert_allclose(attention_rollout(p), want, atol=1e-15)
    # without the residual every token traces back to token 0
    np.testing.assert_allclose(attention_rollout(p, residual=0.0), [[1, 0, 0]] * 3, atol=1e-15)


def test_layers_multiply_from_the_first_layer_up():
    p = np.stack([SHIFT, SWAP])[:, None]  # layer 1 = shift, layer 2 = swap
    # R = A_2 · A_1: row 0 -> (swap) token 2 -> (shift) token 1
    np.testing.assert_array_equal(attention_rollout(p, residual=0.0), [[0, 1, 0], [1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize("fusion, row1", [("mean", [0.4, 0.6]), ("max", [3 / 7, 4 / 7]), ("min", [1 / 3, 2 / 3])])
def test_head_fusion(fusion, row1):
    p = np.array([[[[1, 0], [0.2, 0.8]], [[1, 0], [0.6, 0.4]]]])  # [1, 2, 2, 2]
    np.testing.assert_allclose(attention_rollout(p, 0.0, fusion), [[1, 0], row1], atol=1e-15)


def test_residual_mixes_identity_before_renormalising():
    p = np.array([[[[1, 0], [0.4, 0.6]]]])
    np.testing.assert_allclose(attention_rollout(p, 0.5), [[1, 0], [0.2, 0.8]], atol=1e-15)
    np.testing.assert_allclose(attention_rollout(p, 0.25), [[1, 0], [0.3, 0.7]], atol=1e-15)


def test_discard_drops_smallest_per_row_but_never_the_diagonal():
    a = np.full((4, 4), 0.25)
    a[0] = [0.05, 0.15, 0.3, 0.5]  # the diagonal 0.05 is the smallest and stays
    a[3] = [0.1, 0.2, 0.3, 0.4]
    r = attention_rollout(a[None, None], residual=0.0, discard_ratio=0.5)  # floor(0.5·4) = 2 dropped
    np.testing.assert_allclose(r[0], [0.05 / 0.55, 0, 0, 0.5 / 0.55])
    np.testing.assert_allclose(r[3], [0, 0, 0.3 / 0.7, 0.4 / 0.7])
    assert r[1, 1] == 0.5 and r[2, 2] == 0.5 and (r[1:3] > 0).sum() == 4
    np.testing.assert_array_equal(discard_smallest(a, 1.0), np.diag(np.diag(a)))


@pytest.mark.parametrize("bad, match", [
    (np.ones((2, 3, 3)) / 3, "4-D"),
    (np.ones((1, 1, 2, 3)) / 3, "square"),
    (np.full((1, 1, 2, 2), np.nan), "NaN"),
    (np.ones((1, 1, 2, 2)), "sum to 1"),
    (np.array([[[[1.5, -0.5], [0.5, 0.5]]]]), "negative"),
])
def test_rollout_rejects_bad_patterns(bad, match):
    with pytest.raises(ValueError, match=match):
        attention_rollout(bad)


def test_rollout_rejects_bad_options():
    p = np.broadcast_to(np.eye(2), (1, 1, 2, 2))
    for kw, match in [({"head_fusion": "median"}, "head_fusion"), ({"residual": 1.5}, "residual"),
                      ({"discard_ratio": -0.1}, "discard_ratio")]:
        with pytest.raises(ValueError, match=match):
            attention_rollout(p, **kw)


def test_rollout_row_takes_array_callable_and_last_first_iterable():
    p = random_patterns(0, 4, 3, 6, causal=False)
    full = attention_rollout(p, 0.3, "max", 0.2)
    calls = []

    def layer(i):
        calls.append(i)
        return p[i]

    kw = dict(residual=0.3, head_fusion="max", discard_ratio=0.2)
    np.testing.assert_allclose(rollout_row(p, 2, **kw), full[2], atol=1e-12)
    np.testing.assert_allclose(rollout_row(layer, 2, n_layers=4, **kw), full[2], atol=1e-12)
    assert calls == [3, 2, 1, 0]
    np.testing.assert_allclose(rollout_row(iter(p[::-1]), 2, **kw), full[2], atol=1e-12)
    assert not np.allclose(rollout_row(iter(p), 2, **kw), full[2])  # first-layer-first is wrong
    with pytest.raises(ValueError, match="n_layers"):
        rollout_row(layer, 0)
    with pytest.raises(ValueError, match="query"):
        rollout_row(p, 6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), layers=st.integers(1, 4), heads=st.integers(1, 3), t=st.integers(1, 7),
       residual=st.floats(0, 1), fusion=st.sampled_from(["mean", "max", "min"]), discard=st.floats(0, 1))
def test_rollout_of_causal_patterns_is_row_stochastic_and_causal(seed, layers, heads, t, residual, fusion, discard):
    p = random_patterns(seed, layers, heads, t)
    r = attention_rollout(p, residual, fusion, discard)
    np.testing.assert_allclose(r.sum(-1), 1, atol=1e-12)
    assert (r >= 0).all() and (np.triu(r, 1) == 0).all()
    q = seed % t
    np.testing.assert_allclose(rollout_row(p, q, residual=residual, head_fusion=fusion, discard_ratio=discard),
                               r[q], atol=1e-12)


def test_cross_rollout_by_hand():
    enc = np.array([[[[0.5, 0.5], [0.5, 0.5]]]])  # R_enc = [[.75, .25], [.25, .75]]
    dec = np.array([[[[1, 0], [0.5, 0.5]]]])  # D̂ = [[1, 0], [.25, .75]]
    cross = np.array([[[[0.2, 0.8], [1, 0]]]])  # C·R_enc = [[.35, .65], [.75, .25]]
    out = cross_rollout(enc, dec, cross)
    np.testing.assert_allclose(out.target, [[0.5, 0], [0.125, 0.375]], atol=1e-15)
    np.testing.assert_allclose(out.source, [[0.175, 0.325], [0.375, 0.125]], atol=1e-15)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), le=st.integers(1, 3), ld=st.integers(1, 3), s=st.integers(1, 5),
       t=st.integers(1, 5), residual=st.floats(0, 1))
def test_cross_rollout_rows_sum_to_one(seed, le, ld, s, t, residual):
    enc = random_patterns(seed, le, 2, s, causal=False)
    dec = random_patterns(seed + 1, ld, 2, t)
    cross = random_patterns(seed + 2, ld, 2, max(s, t), causal=False)[..., :t, :s]
    cross = cross / cross.sum(-1, keepdims=True)
    out = cross_rollout(enc, dec, cross, residual)
    np.testing.assert_allclose(out.target.sum(-1) + out.source.sum(-1), 1, atol=1e-12)
    assert (np.triu(out.target, 1) == 0).all() and (out.source >= 0).all()
    if residual == 0:
        np.testing.assert_allclose(out.source.sum(-1), 1, atol=1e-12)


def test_cross_rollout_rejects_mismatched_shapes():
    eye = np.broadcast_to(np.eye(3), (1, 1, 3, 3))
    with pytest.raises(ValueError, match="cross patterns"):
        cross_rollout(eye, eye, np.full((1, 1, 3, 2), 0.5))
