"""attnlab.analysis.machinery.positions: sinusoidal table and similarity, RoPE, ALiBi, a model's own table."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.machinery import positions as P
from attnlab.model.registry import load


def test_positions():
    sin = P.sinusoidal(10, 8)
    assert sin.shape == (10, 8) and np.allclose(sin[0, 1::2], 1)
    assert np.allclose(np.diag(P.similarity(sin)), 1, atol=1e-6)
    r = P.rope_demo(16, 20)
    assert r["spread_rope"].max() < 1e-4 < 1e-2 < r["spread_abs"].max()  # relative vs absolute
    assert np.allclose(r["diagonals"][:, 1:], r["diagonals"][:, :1], atol=1e-4)
    a = P.alibi(4, 5)
    assert np.allclose(a["bias"][0, 4], -0.25 * np.array([4, 3, 2, 1, 0]))
    assert np.allclose(a["last_weights"].sum(-1), 1) and a["last_weights"][0, -1] > a["last_weights"][3, -1]
    kind, table = P.position_table(load("random-decoder"))
    assert kind == "learned" and table.shape == (256, 64)
