"""The adaptive Simpson rule of integrated gradients (analysis/probes/ig_rule.py) on paths whose integral is known: exact on a
cubic, a jump of y 1/800 of the path wide found and cut down to its width, the completeness bound, and every row run
once."""

import numpy as np
import pytest
from attnlab.analysis.probes.ig_rule import (
    FIRST_PANELS,
    FLOOR,
    GRADE,
    MAX_REFINES,
    MAX_STEPS,
    TOLERANCE,
    Rule,
    simpson,
)


def run(rule: Rule, y, terms) -> int:
    """Drive `rule` as integrated_gradients_many does (a run of its wanted nodes, then a round of bisections) until
    it is done within MAX_REFINES rounds; the runs it took."""
    for stage in range(1 + MAX_REFINES):
        a = rule.wanted()
        assert len(set(a.tolist()) & set(rule.y)) == 0  # no node is run twice
        rule.add(a, y(a), {"hook_embed": terms(a)})
        if not rule.refine():
            return stage + 1
    raise AssertionError(f"not done in {MAX_REFINES} rounds")


def test_simpson_panel():
    nodes, w = simpson(0.25, 0.75)
    assert nodes.tolist() == [0.25, 0.5, 0.75]
    np.testing.assert_allclose(w, [1 / 12, 1 / 3, 1 / 12])
    assert w @ nodes**3 == pytest.approx((0.75**4 - 0.25**4) / 4, abs=1e-15)  # exact for cubics


def test_cubic_path_is_exact_at_the_first_nodes():
    # two tokens: y(α) = α³ + 2α, y' = 3α² (token 0) + 2 (token 1)
    rule = Rule()
    rounds = run(rule, lambda a: a**3 + 2 * a, lambda a: np.stack([3 * a**2, 2 + 0 * a], axis=1))
    assert rounds == 1 and rule.steps == 2 * FIRST_PANELS and rule.rows == rule.steps + 1
    np.testing.assert_allclose(rule.integral()["hook_embed"], [1.0, 2.0], atol=1e-14)
    np.testing.assert_allclose(rule.errors(), 0.0, atol=1e-15)


def test_a_sharp_jump_is_found_and_the_rule_is_complete():
    # y jumps by 5 within ≈ 1/800 of the path at α = 0.3141 (a head switching keys), on a slow slope
    c, k = 0.3141, 4000.0

    def sigmoid(a):
        return 0.5 * (1 + np.tanh(k * (a - c) / 2))

    def y(a):
        return 5 * sigmoid(a) + 0.5 * a

    def terms(a):
        s = sigmoid(a)
        return np.stack([5 * k * s * (1 - s), 0.5 + 0 * a], axis=1)  # token 0 makes the jump, token 1 the slope

    rule = Rule()
    rounds = run(rule, y, terms)
    got = rule.integral()["hook_embed"]
    rise = y(np.array([1.0]))[0] - y(np.array([0.0]))[0]
    assert np.abs(rule.errors()).sum() <= TOLERANCE * abs(rise)  # the stopping rule
    assert abs(got.sum() - rise) <= TOLERANCE * abs(rise)  # completeness follows from it
    assert got == pytest.approx([5 * (sigmoid(1.0) - sigmoid(0.0)), 0.5], rel=0.01)
    widths = np.diff(rule.bounds)
    narrow = rule.bounds[:-1][widths < 1 / 800]
    assert len(narrow) and np.all(np.abs(narrow - c) < 0.01)  # only the jump was cut fine
    assert rounds > 3 and rule.rows == rule.steps + 1 < 120  # far fewer than MAX_STEPS


def test_refining_stops_at_max_steps():
    rule, rounds = Rule(), 0

    def flat():  # y flat, y' = 1: never complete
        a = rule.wanted()
        rule.add(a, np.zeros(len(a)), {"hook_embed": np.ones((len(a), 1))})

    flat()
    while rule.refine(max_steps=24):
        flat()
        rounds += 1
    # room for 8, 6, 4, 3, 2, 1 more panels: a third of it (at least one) a round, 4 → 6 → 8 → 9 → 10 → 11 → 12 panels
    assert (rule.steps, rule.rows, rounds) == (24, 25, 6)


def test_graded_rule_integrates_a_norm_of_a_zero_stream():
    """A zero baseline under RMSNorm: each token's y_t(α) = α / √(α² + s_t²) (a norm whose ε sets the scale s_t; a
    later layer's at 1e-12), so y' = 1/s_t = 1e12 at α = 0. The even rule cannot finish in its rounds (its first
    panel weighs y'(0)); the graded one is complete and each token's integral within 1 %."""
    s = np.array([1e-3, 1e-12])  # [2] the tokens' scales

    def y(a):
        return (a[:, None] / np.sqrt(a[:, None] ** 2 + s**2)).sum(1)

    def terms(a):
        return s**2 / (a[:, None] ** 2 + s**2) ** 1.5  # [R, 2]

    even = Rule()
    for stage in range(1 + MAX_REFINES):  # as integrated_gradients_many: the last round bisects nothing
        a = even.wanted()
        even.add(a, y(a), {"hook_embed": terms(a)})
        if stage == MAX_REFINES or not even.refine():
            break
    rise = 2 / np.sqrt(1 + s**2).mean()
    assert np.abs(even.errors()).sum() > 1e6 * TOLERANCE * rise  # what the llama fixture's zero baseline met

    graded = Rule(graded=True)
    assert graded.bounds[1] == pytest.approx(FLOOR, rel=GRADE) and graded.bounds[1] >= FLOOR
    assert np.all(np.diff(graded.bounds[1:FIRST_PANELS + 10]) > 0)
    run(graded, y, terms)
    got = graded.integral()["hook_embed"]
    assert np.abs(graded.errors()).sum() <= TOLERANCE * rise
    np.testing.assert_allclose(got, 1 / np.sqrt(1 + s**2), rtol=0.01)
    assert graded.rows == graded.steps + 1 <= MAX_STEPS + 1


def test_a_jump_on_a_wiggly_path_is_cut_fine_before_the_nodes_run_out():
    """SmolLM2's indirect-object path: y swings on the whole path and jumps by 20 within ~1e-4 of α. Spending every
    node left in one round (the old rule) bisected hundreds of small panels and stopped with the jump's panels 1e-3
    wide: completeness error 112 % here (18.7 % on SmolLM2). A third of the room a round reaches the tolerance."""
    freqs, amps, jump, width = np.array([150.0, 345.0]), np.array([2.0, 1.5]), 20.0, 3e-5

    def y(a):
        return np.sin(a[:, None] * freqs) @ amps + jump / 2 * (1 + np.tanh((a - 0.345) / (2 * width)))

    def terms(a):  # [R, 1]: dy/dα
        dy = np.cos(a[:, None] * freqs) @ (amps * freqs) + jump / (4 * width) * (1 - np.tanh((a - 0.345) / (2 * width)) ** 2)
        return dy[:, None]

    rule = Rule()
    for stage in range(1 + MAX_REFINES):  # as integrated_gradients_many
        a = rule.wanted()
        rule.add(a, y(a), {"hook_embed": terms(a)})
        if stage == MAX_REFINES or not rule.refine():
            break
    assert rule.steps <= MAX_STEPS and rule.rows == rule.steps + 1
    assert abs(rule.errors().sum()) <= TOLERANCE * abs(rule.rise())
    assert np.diff(rule.bounds).min() < 1e-4  # the jump cut to its own width
