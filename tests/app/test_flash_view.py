"""Backends page, topic 11: the tiled computation on a real head — tiles, running max and sum, the verdict."""

from __future__ import annotations

import math

import numpy as np
from attnlab.analysis.machinery.flash_tiling import head_tiling
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, titled, z_of

TEXT = "fenna is twelve . fenna has a parrot . garo is seven . what pet does fenna have ?"


def test_backends_shows_the_tiling_of_the_chosen_head():
    at = open_page("backends", model="lecture-decoder", text=TEXT, fl_layer=1, fl_head=2, fl_bq=8, fl_bk=8,
                   fl_qblock=1, fl_step=2)
    ok(at)
    lm = load("lecture-decoder")
    tiling, _ = head_tiling(lm, lm.encode(TEXT), "blocks.1.attn", 2, 8, 8)
    grid = titled(at, "The tiles")["data"][0]
    z = z_of(grid)
    assert grid["xgap"] == grid["ygap"] == 2  # a few tiles: each one apart
    nq, nk = -(-tiling.T // 8), -(-tiling.T // 8)
    assert z.shape == (nq, nk) and z[1].tolist() == [2, 3] + [0] * (nk - 2)  # block 1: tile 2 of 2, rest masked
    assert (z[0, 1:] == 0).all() and (z[2:] == 1).sum() > 0
    stats = titled(at, "Row 15")["data"]
    np.testing.assert_allclose(arr(stats[0]["y"]), [s.m_after[7] for s in tiling.steps_of(1)])
    np.testing.assert_allclose(arr(stats[2]["y"]), [s.l_after[7] for s in tiling.steps_of(1)])
    (df,) = [d.value for d in at.dataframe if "rescale exp(m before − m after)" in d.value.columns]
    np.testing.assert_allclose(df["rescale exp(m before − m after)"], tiling.steps_of(1)[1].rescale)
    assert any("The tiled output equals the full softmax's within 1e-06" in s.value for s in at.success)
    text = " ".join(m.value for m in at.markdown)
    assert "SRAM" in text and "recomputes" in text and f"{tiling.T}×{tiling.T} = **{tiling.T ** 2:,}**" in text


def test_a_long_text_walks_its_first_512_tokens():
    """At 4,096 tokens the tile grid had 262,144 cells (a 5 MB figure, 18 s of tiling, over the 2 MB payload target):
    the walk runs on the first WALK_TOKENS tokens, says so, and is checked against the model's run of them."""
    from attnlab.app.flash_view import WALK_TOKENS

    text = " ".join(f"w{i % 97}" for i in range(900))
    at = open_page("backends", model="random-long-decoder", text=text, fl_bq=8, fl_bk=8)
    ok(at)
    lm = load("random-long-decoder")
    n = len(lm.encode(text).ids[0])
    cut = lm.first_tokens(text, limit=WALK_TOKENS)
    tiling, _ = head_tiling(lm, lm.encode(cut), f"blocks.{lm.cfg.n_layers - 1}.attn", 0, 8, 8)  # the defaults
    assert n > 1000 and WALK_TOKENS - 8 < tiling.T <= WALK_TOKENS
    grid = titled(at, "The tiles")["data"][0]
    assert z_of(grid).shape == (-(-tiling.T // 8),) * 2 and grid["xgap"] == grid["ygap"] == 0  # 64 across: no gaps
    assert any(f"The walk runs on the text's first {tiling.T:,} tokens" in c.value and f"all {n:,} would make "
               f"{math.ceil(n / 8) ** 2:,} tiles" in c.value for c in at.caption)
    assert any("The tiled output equals the full softmax's within 1e-06" in s.value for s in at.success)
