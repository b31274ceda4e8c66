"""The query–key view: PCA against hand and numpy references, the vectors against the captured scores."""

import numpy as np
import pytest
import torch
from attnlab.analysis.attention.qk_projection import (
    align,
    head_vectors,
    pca_2d,
    qk_points,
    qk_table,
    site_tokens,
)
from attnlab.model.config import ModelConfig
from attnlab.model.loaded import LoadedModel
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model


def test_pca_of_points_on_a_line_by_hand():
    xy, ratio = pca_2d(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))
    # centred: (-1,-1), (0,0), (1,1); the first axis is (1,1)/√2, so the coordinates are -√2, 0, √2
    np.testing.assert_allclose(xy[:, 0], [-np.sqrt(2), 0, np.sqrt(2)], atol=1e-12)
    np.testing.assert_allclose(xy[:, 1], 0, atol=1e-12)
    np.testing.assert_allclose(ratio, [1.0, 0.0], atol=1e-12)


def test_pca_matches_the_covariance_eigenvectors():
    x = np.random.default_rng(0).normal(size=(40, 6)) * np.array([5, 3, 1, 0.5, 0.2, 0.1])
    xy, ratio = pca_2d(x)
    c = x - x.mean(0)
    vals, vecs = np.linalg.eigh(c.T @ c)  # ascending
    top = vecs[:, ::-1][:, :2]  # [6, 2]
    ref = c @ top
    np.testing.assert_allclose(np.abs(xy), np.abs(ref), atol=1e-9)  # each axis up to its sign
    np.testing.assert_allclose(ratio, vals[::-1][:2] / vals.sum(), atol=1e-12)
    assert ratio[0] > 0.6 and ratio.sum() <= 1


def test_pca_of_a_single_point_is_zero():
    xy, ratio = pca_2d(np.ones((1, 4)))
    np.testing.assert_array_equal(xy, [[0.0, 0.0]])
    np.testing.assert_array_equal(ratio, [0.0, 0.0])


def _tiny(**kw) -> LoadedModel:
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64, **kw)
    torch.manual_seed(0)
    return LoadedModel("tiny", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")


@pytest.mark.parametrize("kw", [{}, {"positional": "rope", "qk_norm": True, "n_kv_heads": 2}])
def test_head_vectors_reproduce_the_captured_scores(kw):
    lm = _tiny(**kw)
    inp = lm.encode("the cat sat")
    site = "blocks.1.attn"
    fwd = lm.forward(inp, names=[f"{site}.hook_attn_scores"])
    scores = fwd.capture.tensor(f"{site}.hook_attn_scores")[0].numpy()  # [H, q, k] scaled, unmasked
    run = lm.run(inputs=inp)
    rec = run.records[site]
    for h in range(lm.cfg.n_heads):
        q, k = head_vectors(run, site, h)
        assert q.shape == k.shape == (len(inp.tokens), lm.cfg.d_head)
        np.testing.assert_allclose(rec.scale * q @ k.T, scores[h], atol=1e-5)
        s = np.where(rec.mask_for(), rec.scale * q @ k.T, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(p / p.sum(-1, keepdims=True), rec.pattern(h), atol=1e-5)
    with pytest.raises(IndexError):
        head_vectors(run, site, lm.cfg.n_heads)


def test_align_keeps_every_softmax_row():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(7, 8)) * 4, rng.normal(size=(9, 8)) + 3
    qa, ka = align(q, k)

    def soft(a, b):
        s = a @ b.T
        e = np.exp(s - s.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    np.testing.assert_allclose(soft(qa, ka), soft(q, k), atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(qa, axis=1).mean(), np.linalg.norm(ka, axis=1).mean(), rtol=1e-12)
    a = np.linalg.norm(qa[0]) / np.linalg.norm(q[0])  # the one scale factor
    np.testing.assert_allclose(qa, q * a, rtol=1e-12)
    np.testing.assert_allclose(ka.mean(0) * a, q.mean(0), atol=1e-10)  # key centroid moved onto the queries'


def test_points_over_a_batch(dec):
    texts = ["abc", "hello there", "abc"]
    runs = [dec.run(t) for t in texts]
    pts = qk_points(runs, "blocks.0.attn", 2, names=["a", "b", "c"])
    lens = [len(r.tokens) for r in runs]  # [BOS] + bytes
    assert lens == [4, 12, 4]
    assert pts.of("query").sum() == pts.of("key").sum() == sum(lens)
    assert pts.xy.shape == (2 * sum(lens), 2) and np.isfinite(pts.xy).all()
    assert list(pts.source[: sum(lens)]) == [0] * 4 + [1] * 12 + [2] * 4
    assert pts.labels[:4] == runs[0].tokens and list(pts.position[4:16]) == list(range(12))
    assert 0 < pts.explained[1] <= pts.explained[0] < 1
    # identical inputs give identical vectors: repeated tokens are never merged, they coincide
    np.testing.assert_allclose(pts.xy[:4], pts.xy[16:20], atol=1e-9)
    rows = qk_table(pts)
    assert rows[0] == {"kind": "query", "input": "a", "position": 0, "label": runs[0].tokens[0],
                       "pc1": pts.xy[0, 0], "pc2": pts.xy[0, 1]}
    assert rows[-1]["kind"] == "key" and rows[-1]["input"] == "c"
    raw = qk_points(runs, "blocks.0.attn", 2, normalise=False)
    ref, _ = pca_2d(np.concatenate([np.concatenate([head_vectors(r, "blocks.0.attn", 2)[0] for r in runs]),
                                    np.concatenate([head_vectors(r, "blocks.0.attn", 2)[1] for r in runs])]))
    np.testing.assert_allclose(raw.xy, ref, atol=1e-9)


def test_cross_attention_points_name_target_queries_and_source_keys(encdec):
    run = encdec.run("ab", "hello")
    cross = next(s for s, r in run.records.items() if r.attn_type == "cross")
    assert site_tokens(run, cross) == (run.tokens, run.src_tokens)
    pts = qk_points([run], cross, 0)
    assert [pts.labels[i] for i in np.flatnonzero(pts.of("query"))] == run.tokens
    assert [pts.labels[i] for i in np.flatnonzero(pts.of("key"))] == run.src_tokens
    with pytest.raises(ValueError):
        qk_points([], cross, 0)
