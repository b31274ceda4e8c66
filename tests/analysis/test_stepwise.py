import numpy as np
import pytest
from attnlab.analysis.attention.stepwise import attention_steps, explain_weight, multi_head_steps


def causal(t: int) -> np.ndarray:
    return np.tril(np.ones((t, t), dtype=bool))  # bool [t, t], True = may attend

E = np.e
# the lecture quiz: scaled scores and a causal mask
QUIZ = np.array([[1.0, 0, -1, -1], [1, 1, -1, 0], [0, 1, 1, -1], [-1, -1, 2, 1]])


def test_lecture_quiz_gives_the_students_fractions():
    s = attention_steps(None, None, None, mask=causal(4), scores=QUIZ)
    assert s.weights[1, 1] == 0.5  # α₂,₂ (1-based): e¹ / (e¹ + e¹), exactly
    want = np.array([
        [1, 0, 0, 0],
        [1 / 2, 1 / 2, 0, 0],
        [1 / (1 + 2 * E), E / (1 + 2 * E), E / (1 + 2 * E), 0],  # e⁰, e¹, e¹ normalised
        np.array([E**-1, E**-1, E**2, E]) / (2 * E**-1 + E**2 + E),
    ])
    np.testing.assert_allclose(s.weights, want, rtol=1e-14, atol=0)
    assert (s.weights[np.triu_indices(4, 1)] == 0).all()
    np.testing.assert_array_equal(s.raw, QUIZ)
    np.testing.assert_array_equal(s.scaled, QUIZ)
    assert s.scale == 1.0 and s.output is None
    assert np.isneginf(s.masked[np.triu_indices(4, 1)]).all()
    np.testing.assert_array_equal(s.masked[np.tril_indices(4)], QUIZ[np.tril_indices(4)])


def test_from_q_and_k_with_the_default_scale():
    q = np.array([[2.0, 0, 0, 0]])  # d = 4: scale 1/2
    k = np.array([[1.0, 0, 0, 0], [0, 1, 0, 0]])
    v = np.array([[10.0, 0], [0, 10]])
    s = attention_steps(q, k, v)
    np.testing.assert_array_equal(s.raw, [[2, 0]])
    np.testing.assert_array_equal(s.scaled, [[1, 0]])
    np.testing.assert_allclose(s.weights, [[E / (1 + E), 1 / (1 + E)]])
    np.testing.assert_allclose(s.output, [[10 * E / (1 + E), 10 / (1 + E)]])
    assert attention_steps(q, k, v, scale=1.0).scaled[0, 0] == 2


def test_fully_masked_row_and_argument_errors():
    s = attention_steps(scores=np.ones((2, 2)), v=np.eye(2), mask=np.array([[False, False], [True, True]]))
    np.testing.assert_array_equal(s.weights, [[0, 0], [0.5, 0.5]])
    np.testing.assert_array_equal(s.output, [[0, 0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="give q and k"):
        attention_steps(None, None, None)
    with pytest.raises(ValueError, match="not both"):
        attention_steps(np.ones((1, 2)), np.ones((1, 2)), scores=np.ones((1, 1)))


def test_multi_head_steps_split_and_concatenate():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 5, 4))
    mask = np.tril(np.ones((5, 5), bool))
    steps, out = multi_head_steps(q, k, v, 2, mask)
    assert out.shape == (5, 4) and len(steps) == 2
    assert np.allclose(out[:, 2:], attention_steps(q[:, 2:], k[:, 2:], v[:, 2:], mask=mask).output)
    assert steps[0].scale == pytest.approx(1 / np.sqrt(2))
    with pytest.raises(ValueError, match="divisible"):
        multi_head_steps(q, k, v, 3)


def test_explain_weight_lecture_quiz():
    s = attention_steps(scores=[[1, 0, -1, -1], [1, 1, -1, 0], [0, 1, 1, -1], [-1, -1, 2, 1]],
                        mask=np.tril(np.ones((4, 4), bool)))
    e = explain_weight(s, 1, 1)
    assert e["weight"] == pytest.approx(0.5) and e["visible"].tolist() == [True, True, False, False]
    assert explain_weight(s, 1, 3)["masked"] and explain_weight(s, 1, 3)["weight"] == 0
