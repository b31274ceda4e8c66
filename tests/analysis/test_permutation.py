"""attnlab.analysis.machinery.permutation: the permutation helpers on exact values, and equivariance measured hook by hook —
exact without positions and mask, broken by each position scheme and by a causal mask, each where it should."""

import numpy as np
import pytest
from attnlab.analysis.machinery import permutation as P
from attnlab.model.inputs import InputError
from attnlab.model.tokenizer import ByteTokenizer

Q = list(P.QUANTITIES)  # q, k, v, scores, weights, outputs


class Bytes:  # what permutation_study reads of a LoadedModel: its tokenizer
    tokenizer = ByteTokenizer()


@pytest.fixture(scope="module")
def study():
    ids = list(b"the cat sat")  # 11 tokens, repeats included
    return P.run_study(ids, [chr(i) for i in ids], [10, 3, 7, 0, 9, 1, 5, 2, 8, 4, 6], 260)


def row(study, name):
    return study.deltas[study.settings.index(name)]  # [layer, quantity]


def test_parse_permutation():
    assert P.parse_permutation("2, 0 1", 3) == [2, 0, 1]
    assert P.parse_permutation("0", 1) == [0]
    for bad in ("0 1", "0 1 1", "0 1 3", "a b c", "0 1 2 3"):
        with pytest.raises(ValueError, match="0…2"):
            P.parse_permutation(bad, 3)


def test_random_permutation_and_inverse():
    assert P.random_permutation(5, 0) == [2, 4, 3, 0, 1]  # numpy's default_rng(0)
    assert P.random_permutation(6, 3) == [2, 5, 4, 1, 3, 0]
    assert P.random_permutation(1, 0) == [0]
    assert P.inverse([2, 0, 1]).tolist() == [1, 2, 0]
    perm = P.random_permutation(9, 4)
    assert np.asarray(perm)[P.inverse(perm)].tolist() == list(range(9))


def test_unpermute_puts_rows_and_columns_back():
    x = np.arange(3 * 2, dtype=np.float32).reshape(1, 1, 3, 2)  # [L, H, T, d]
    m = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)  # [L, H, T, T]
    perm = [2, 0, 1]
    inv = P.inverse(perm)
    assert np.array_equal(P.unpermute(x[:, :, perm], "q", inv), x)
    assert np.array_equal(P.unpermute(m[:, :, perm][:, :, :, perm], "weights", inv), m)
    assert P.unpermute(x[:, :, perm], "q", inv)[0, 0, :, 0].tolist() == [0, 2, 4]


def test_models_share_every_weight_but_the_position_table():
    ms = P.study_models(260)
    base = ms["none"].state_dict()
    for scheme, m in ms.items():
        sd = m.state_dict()
        assert set(sd) - set(base) == ({"embed.pos.weight"} if scheme == "learned" else set())
        assert all(np.array_equal(sd[k].numpy(), v.numpy()) for k, v in base.items())
    assert P.study_models(260)["learned"].embed.pos.weight.equal(ms["learned"].embed.pos.weight)  # seeded


def test_no_positions_no_mask_is_exactly_equivariant(study):
    d = row(study, "none")
    assert d.shape == (2, 6)
    assert d.max() <= 1e-5
    a, b = study.original["none"], study.permuted["none"]
    for q in Q:  # the shuffled run is the original, shuffled: row i of it is row perm[i] of the original
        want = a[q][:, :, study.perm]
        if q in P.MATRICES:
            want = want[:, :, :, study.perm]
        np.testing.assert_allclose(b[q], want, atol=1e-5)
    assert np.allclose(study.original["none"]["weights"].sum(-1), 1, atol=1e-6)


def test_each_position_scheme_breaks_it_where_it_enters(study):
    for name in ("learned", "sinusoidal", "rope", "alibi"):
        assert row(study, name).max() > 1e-3, name
        assert row(study, name)[:, Q.index("weights")].max() > 1e-3, name
    for name in ("learned", "sinusoidal"):  # added to x: q, k, v differ from layer 0 on
        assert row(study, name)[0, :3].min() > 1e-2
    rope = row(study, "rope")[0]  # rotates q and k only: layer 0's v is untouched
    assert rope[Q.index("q")] > 1e-2 and rope[Q.index("k")] > 1e-2 and rope[Q.index("v")] <= 1e-6
    alibi = row(study, "alibi")[0]  # a bias on the scores: layer 0's q, k, v are untouched
    assert alibi[:3].max() <= 1e-6 and alibi[Q.index("scores")] > 1e-2


def test_a_causal_mask_breaks_it_at_the_weights(study):
    causal = row(study, "none + causal mask")
    assert causal[0, :4].max() <= 1e-6  # layer 0: q, k, v and the unmasked scores are still exact
    assert causal[0, Q.index("weights")] > 1e-2 and causal[1].min() > 1e-3  # layer 1 inherits it everywhere
    w = study.original["none + causal mask"]["weights"]
    assert np.array_equal(np.triu(w[0, 0], 1), np.zeros_like(w[0, 0]))


def test_permutation_study_tokenizes_and_orders():
    s = P.permutation_study(Bytes(), "abcd", "reverse")
    assert s.tokens == ["a", "b", "c", "d"] and s.perm == [3, 2, 1, 0]
    assert s.permuted_tokens == ["d", "c", "b", "a"]
    assert P.permutation_study(Bytes(), "abcd", "1 0 3 2").perm == [1, 0, 3, 2]
    assert P.permutation_study(Bytes(), "abcde", None, 0).perm == [2, 4, 3, 0, 1]
    assert s.table().shape == (6, 6) and np.array_equal(s.table(1), s.deltas[:, 1])
    with pytest.raises(InputError, match="2 to 48"):
        P.permutation_study(Bytes(), "a")
    with pytest.raises(InputError, match="49 tokens"):
        P.permutation_study(Bytes(), "x" * 49)
    with pytest.raises(ValueError, match="exactly once"):
        P.permutation_study(Bytes(), "abcd", "0 1 2")
