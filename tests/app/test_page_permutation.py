"""The Permutation page through AppTest: defaults, every option, and the identity read off the page's own
numbers — the original and the shuffled-then-un-shuffled matrices side by side, and the table of max |Δ|."""

import numpy as np
import pytest

from tests.app.conftest import ok, open_page, titled, z_of

SCHEMES = ("learned", "sinusoidal", "rope", "alibi")


def side_by_side(at, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(original, shuffled as computed, un-shuffled) of the three figures, titled "{panel}<br>{what}"."""
    return tuple(z_of(titled(at, f"{name}<br>{what}")["data"][0])
                 for name in ("original", "shuffled run, as computed", "shuffled, then un-shuffled"))


def table(at):
    return at.dataframe[0].value  # settings × quantities (+ 'equivariant')


def test_defaults_show_exact_equivariance_without_positions():
    at = open_page("permutation")
    ok(at)
    a, p, u = side_by_side(at, "weights, layer 0, head 0")
    assert a.shape == p.shape == u.shape == (22, 22)  # "the cat sat on the mat", one byte per token
    assert np.abs(a - u).max() <= 1e-5 and np.abs(a - p).max() > 1e-3  # shuffled, and put back exactly
    df = table(at)
    assert list(df.index) == ["none", "none + causal mask", *SCHEMES]
    assert list(df.columns) == ["q", "k", "v", "scores", "weights", "outputs", "equivariant"]
    assert df.loc["none"].iloc[:6].max() <= 1e-5 and df.loc["none", "equivariant"] == "yes"
    for name in ("none + causal mask", *SCHEMES):
        assert df.loc[name].iloc[:6].max() > 1e-3 and df.loc[name, "equivariant"] == "no", name
    assert "3.7e-09" in at.markdown[-1].value or "equal up to float32 rounding" in at.markdown[-1].value
    assert "10 19 16 4 2 12 6 20 3 11 8 0 18 13 7 21 5 17 14 9 1 15" in at.markdown[1].value  # seed 0
    assert "same seed (0)" in at.caption[0].value
    assert [b.proto.label for b in at.get("download_button")] == ["⬇ CSV", "⬇ NPZ", "⬇ JSON"]
    url = dict(at.query_params)
    assert {k: url[k] for k in ("perm_text", "perm_tok", "perm_mode", "perm_seed", "perm_set", "perm_q")} in (
        {"perm_text": "the cat sat on the mat", "perm_tok": "random-encoder", "perm_mode": "random", "perm_seed": "0",
         "perm_set": "none", "perm_q": "weights"},
        {"perm_text": ["the cat sat on the mat"], "perm_tok": ["random-encoder"], "perm_mode": ["random"],
         "perm_seed": ["0"], "perm_set": ["none"], "perm_q": ["weights"]})


@pytest.mark.parametrize("setting", ["none + causal mask", *SCHEMES])
def test_each_scheme_and_the_causal_mask_break_it(setting):
    at = open_page("permutation", perm_set=setting, perm_q="weights", perm_layer=1, perm_head=2)
    ok(at)
    a, _, u = side_by_side(at, "weights, layer 1, head 2")
    assert np.abs(a - u).max() > 1e-3
    assert np.allclose(a.sum(-1), 1, atol=1e-5) and np.allclose(u.sum(-1), 1, atol=1e-5)
    assert "different: the order mattered" in at.markdown[-1].value


@pytest.mark.parametrize("qty,shape", [("q", (22, 16)), ("k", (22, 16)), ("v", (22, 16)), ("scores", (22, 22)),
                                       ("outputs", (22, 16))])
def test_every_quantity_is_permuted_the_same_way(qty, shape):
    at = open_page("permutation", perm_q=qty, perm_layer=1, perm_head=3)
    ok(at)
    a, p, u = side_by_side(at, f"{qty}, layer 1, head 3")
    assert a.shape == shape and np.abs(a - u).max() <= 1e-5
    assert np.abs(p - a[[10, 19, 16, 4, 2, 12, 6, 20, 3, 11, 8, 0, 18, 13, 7, 21, 5, 17, 14, 9, 1, 15]]
                  [:, [10, 19, 16, 4, 2, 12, 6, 20, 3, 11, 8, 0, 18, 13, 7, 21, 5, 17, 14, 9, 1, 15]
                      if qty == "scores" else slice(None)]).max() <= 1e-5


def test_typed_permutation_lecture_tokens_and_one_layer():
    at = open_page("permutation", perm_text="alvo has a red box", perm_tok="lecture-decoder", perm_mode="typed",
                   perm_order="1 3 0 4 2", perm_tlayer=0, perm_set="rope", perm_q="v")
    ok(at)
    assert "`alvo` `has` `a` `red` `box`" in at.markdown[1].value
    assert "`has` `red` `alvo` `box` `a`" in at.markdown[1].value
    df = table(at)  # layer 0 only: RoPE rotates q and k, never v; ALiBi touches the scores only
    assert df.loc["rope", "v"] <= 1e-6 and df.loc["rope", "q"] > 1e-3
    assert df.loc["alibi", ["q", "k", "v"]].max() <= 1e-6 and df.loc["alibi", "scores"] > 1e-3
    assert df.loc["none + causal mask", ["q", "k", "v", "scores"]].max() <= 1e-6
    assert df.loc["none + causal mask", "weights"] > 1e-3
    a, _, u = side_by_side(at, "v, layer 0, head 0")
    assert a.shape == (5, 16) and np.abs(a - u).max() <= 1e-6


def test_blank_typed_order_reverses_and_the_seed_changes_the_shuffle():
    at = open_page("permutation", perm_text="abcd", perm_mode="typed")
    ok(at)
    assert "`3 2 1 0`" in at.markdown[1].value
    df = table(at)  # ALiBi's bias −m·|i − j| is symmetric: a reversal keeps every |i − j|, so nothing breaks
    assert df.loc["alibi"].iloc[:6].max() <= 1e-5 and df.loc["alibi", "equivariant"] == "yes"
    assert df.loc["rope"].iloc[:6].max() > 1e-3  # RoPE sees the signed offset
    at = open_page("permutation", perm_text="abcde", perm_seed=0)
    assert "`2 4 3 0 1`" in at.markdown[1].value  # numpy's default_rng(0).permutation(5)
    at = open_page("permutation", perm_text="abcde", perm_seed=7)
    ok(at)
    assert f"`{' '.join(map(str, np.random.default_rng(7).permutation(5)))}`" in at.markdown[1].value


def test_bad_permutation_and_bad_text_are_messages():
    at = open_page("permutation", perm_text="abcd", perm_mode="typed", perm_order="0 1 1 2")
    assert not at.exception and "exactly once" in at.error[0].value
    at = open_page("permutation", perm_text="x")
    assert not at.exception and "2 to 48" in at.error[0].value
