"""The neuron view in the Heatmaps page's close-up: q, k and q⊙k of a real query/key pair, and the numbers
from the score to the weight, equal to the model's own records."""

import numpy as np
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page, titled, z_of


def test_neuron_view_matches_the_record():
    text = "The cat sat on the mat."
    at = open_page("heatmaps", model="random-decoder", text=text, layer=1, head=2, query=9, nv_key=4)
    ok(at)
    rec = load("random-decoder").run(text)["blocks.1.attn"]
    fig = titled(at, "q (query 9), k (key 4) and q⊙k")
    z = z_of(fig["data"][0])  # wrapped to 8 dimensions a row, so every number fits its cell: [2·3, 8]
    assert z.shape == (6, 8) and list(fig["layout"]["yaxis"]["ticktext"][:4]) == ["q d0–7", "k d0–7", "q⊙k d0–7",
                                                                                   "q d8–15"]
    z = z.reshape(2, 3, 8).transpose(1, 0, 2).reshape(3, 16)  # [chunks, 3, 8] -> [3, d_head]
    np.testing.assert_allclose(z[0], rec.q[0, 2, 9], atol=1e-6)
    np.testing.assert_allclose(z[1], rec.k[0, 2, 4], atol=1e-6)
    np.testing.assert_allclose(z[2], z[0] * z[1], atol=1e-6)
    assert abs(z[2].sum() - float(rec.raw_qk(2)[9, 4])) <= 1e-6
    line = next(m.value for m in at.markdown if m.value.startswith("Σ q⊙k"))
    assert f"**{float(rec.raw_qk(2)[9, 4]):.4f}**" in line and "1/√16 = 0.2500" in line
    assert f"**{float(rec.scores(2)[9, 4]):.4f}**" in line and f"weight **{float(rec.pattern(2)[9, 4]):.4f}**" in line


def test_neuron_view_defaults_to_the_strongest_key_and_shows_a_masked_one():
    text = "abcdefgh"
    at = open_page("heatmaps", model="random-decoder", text=text, layer=0, head=1, query=5)
    ok(at)
    best = int(load("random-decoder").run(text)["blocks.0.attn"].pattern(1)[5].argmax())
    assert titled(at, f"q (query 5), k (key {best}) and q⊙k")
    at = open_page("heatmaps", model="random-decoder", text=text, layer=0, head=1, query=2, nv_key=6)
    ok(at)
    line = next(m.value for m in at.markdown if m.value.startswith("Σ q⊙k"))
    assert "weight **0.0000** (masked" in line
