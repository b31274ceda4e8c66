"""The tour's lecture figures hold the model's own numbers: step 2's q, k and v strips give back the head's output
(hook_z, captured here) when the lecture's formula is applied to them; step 9's three panels are causal (nothing
above the diagonal), cross (target × source) and bidirectional, every row summing to 1; step 11's tiling stepper
walks the tiles and its last tile ends on eager's output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.app.presets import presets
from attnlab.app.tour import STEPS
from attnlab.model.registry import load


def built(builtin: str):
    (step,) = [s for s in STEPS if s.build.__name__ == builtin.replace("-", "_")]
    return step.build(False)


def by_name(fig, name: str):
    (t,) = [t for t in fig.data if t.name == name]
    return t


def eager_z(model: str, text: str, site: str, head: int) -> np.ndarray:
    """The model's own output of one head, [T, d_head], from a capture made here."""
    lm = load(model)
    with torch.no_grad():
        cap = lm.forward(lm.encode(text), backend="eager", names=[f"{site}.hook_z"]).capture
    return cap.tensor(f"{site}.hook_z")[0, :, head].double().numpy()  # [B, T, H, d] -> [T, d]


@pytest.fixture(scope="module")
def qkv():
    return built("query-key-value")


def test_the_strips_give_back_the_heads_output(qkv):
    fig, n = qkv.fig, qkv.numbers
    q = np.asarray(by_name(fig, "q").z, dtype=np.float64)[0]  # [d]
    k = np.asarray(by_name(fig, "k").z, dtype=np.float64)  # [keys, d]
    v = np.asarray(by_name(fig, "v").z, dtype=np.float64)  # [keys, d]
    d = q.shape[0]
    assert k.shape == v.shape == (n["keys"], d) and d == n["d_head"] == 32
    assert fig.layout.meta["keys"] == list(range(n["query"] + 1))  # every key the causal row may read
    scores = k @ q / np.sqrt(d)  # the lecture's q·k/√d on the shown vectors
    np.testing.assert_allclose(np.asarray(by_name(fig, "q·k/√d").z)[:, 0], scores, atol=1e-9)
    alpha = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    np.testing.assert_allclose(np.asarray(by_name(fig, "α").z)[:, 0], alpha, atol=1e-12)
    out, model_z = np.asarray(by_name(fig, "output").z, dtype=np.float64)  # [2, d]: Σ α v, the model's z
    np.testing.assert_allclose(out, alpha @ v, atol=1e-12)
    p = next(p for p in presets("lecture-decoder") if p.id == "decoder-story-1")
    z = eager_z("lecture-decoder", p.text, f"blocks.{n['layer']}.attn", n["head"])[n["query"]]
    assert np.abs(alpha @ v - z).max() < 1e-5 and np.abs(model_z - z).max() < 1e-6
    assert n["max_abs_vs_model"] == pytest.approx(np.abs(out - model_z).max())
    assert alpha.max() < 0.9 and int(np.argmax(alpha)) == n["top"] == 25  # a visible mix, led by '48'


def test_the_q_k_v_step_marks_the_heaviest_key_and_the_output(qkv):
    marks = [s for s in qkv.fig.layout.shapes if s.name == "tour-look"]
    assert {s.xref for s in marks} == {"x2", "x4", "x5", "x6"}  # K row, α cell, V row, the output strips
    assert all(s.y0 < qkv.numbers["top"] < s.y1 for s in marks if s.xref != "x6")
    assert f"α = **{qkv.numbers['weight']:.3f}**" in qkv.narrative


@pytest.fixture(scope="module")
def kinds():
    return built("architectures")


def test_the_three_kinds_of_attention_side_by_side(kinds):
    causal, cross, bidir = (np.asarray(by_name(kinds.fig, n).z, dtype=np.float64) for n in
                            ("causal", "cross", "bidirectional"))
    lm = load("lecture-encdec")
    p = next(p for p in presets("lecture-encdec") if p.id == "encdec-translation-1")
    run = lm.capture(lm.encode(p.text, p.src_text), backend="eager")
    T, S = len(run.tokens), len(run.src_tokens)
    assert causal.shape == (T, T) and cross.shape == (T, S) and bidir.shape == (S, S)
    assert (np.triu(causal, 1) == 0).all()  # exactly 0 above the diagonal
    assert np.triu(bidir, 1).sum(-1)[:-1].min() > 0  # every encoder row but the last reads later tokens
    for m in (causal, cross, bidir):
        np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(cross, run.matrices("cross")[-1].mean(0), atol=1e-6)
    np.testing.assert_allclose(bidir, run.matrices("encoder")[-1].mean(0), atol=1e-6)
    circles = by_name(kinds.fig, "reference alignment")
    assert circles.xaxis == "x2" and list(circles.y) == [t - 1 for t, _ in p.alignment]
    assert f"a {T} × {S} rectangle" in kinds.narrative


@pytest.fixture(scope="module")
def flash():
    return built("flash")


def test_the_flash_step_steps_through_the_tiles_to_eagers_output(flash):
    n, fig = flash.numbers, flash.fig
    strips = np.asarray(by_name(fig, "partial output").z, dtype=np.float64)  # [tiles + 1, d]: the last step shown
    assert strips.shape[0] - 1 == n["tiles"] == len(fig.layout.sliders[0].steps)
    p = next(p for p in presets("lecture-decoder") if p.id == "decoder-retrieval-4")
    z = eager_z("lecture-decoder", p.text, f"blocks.{n['layer']}.attn", n["head"])[n["row"]]
    assert np.abs(strips[-2] - z).max() < 1e-6  # the final tile's output is eager's
    np.testing.assert_allclose(strips[-1], z, atol=1e-7)  # the row under it: eager's own
    assert np.abs(strips[0] - z).max() > 0.1  # the first tile alone is not the answer
    m = np.asarray(fig.data[0].y, dtype=np.float64)
    assert m[n["jump_tile"] - 1] == pytest.approx(n["m_after"]) and m[n["jump_tile"] - 2] == pytest.approx(n["m_before"])
    assert n["rescale"] == pytest.approx(np.exp(n["m_before"] - n["m_after"]))
    third = fig.layout.sliders[0].steps[2].args[0]["z"][2]  # [tiles + 1, d] after tile 3
    assert np.isnan(np.asarray(third, dtype=np.float64)[3:-1]).all() and np.isfinite(np.asarray(third)[:3]).all()
    assert fig.layout.sliders[0].active == n["tiles"] - 1
    assert f"equals eager's to **{n['final_vs_eager']:.1e}**" in flash.narrative
