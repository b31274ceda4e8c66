"""analysis.mechanics: generation traces, the KV-cache demonstrations, timings, benchmarks, multi-head
steps and the position pictures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from analysis import mechanics as M
from analysis.consistency import TOL_CACHE
from analysis.stepwise import attention_steps
from model.inputs import Inputs
from model.registry import load

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def dec():
    return load("random-decoder")


@pytest.fixture(scope="module")
def encdec():
    return load("random-encdec")


def test_generation_trace_rows_equal_the_full_run(dec):
    inp = dec.encode(TEXT)
    tr = M.generation_trace(dec, inp, 5, backend="sdpa")
    T0 = inp.ids.shape[1]
    assert tr.prompt_len == T0 and tr.n_steps == 5 and len(tr.tokens) == T0 + 5
    assert tr.tokens[:T0] == inp.tokens
    # teacher-forcing the generated ids gives the same rows: row of step s = pattern row of position T0 + s − 1
    full = dec.forward(Inputs(torch.tensor([tr.ids[:-1]]), tr.tokens[:-1])).capture
    for site in tr.sites:
        want = full[site].pattern()[:, T0 - 1:, :]  # [H, steps, K]
        got = tr.rows[site].transpose(1, 0, 2)  # [H, steps, K]
        assert np.allclose(got, want, atol=1e-5)
        assert np.allclose(tr.rows[site].sum(-1), 1, atol=1e-5)
    assert tr.top_probs.shape == (5, M.TOP_K) and np.all(np.diff(tr.top_probs, axis=1) <= 1e-7)
    assert np.allclose(tr.chosen_prob, tr.top_probs[:, 0])  # greedy picks the most likely token


def test_generation_trace_sampling_is_seeded_and_top_k_bounded(dec):
    inp = dec.encode(TEXT)
    a = M.generation_trace(dec, inp, 6, temperature=1.5, top_k=3, seed=7)
    b = M.generation_trace(dec, inp, 6, temperature=1.5, top_k=3, seed=7)
    assert a.ids == b.ids
    assert np.allclose(a.top_probs[:, 3:], 0) and np.allclose(a.top_probs[:, :3].sum(1), 1, atol=1e-5)


def test_generation_trace_encdec_has_cross_rows(encdec):
    inp = encdec.encode("", "the cat sat .")
    tr = M.generation_trace(encdec, inp, 4)
    cross = [s for s in tr.sites if tr.kinds[s] == "cross"]
    assert cross and all(tr.rows[s].shape == (tr.n_steps, 4, len(inp.src_tokens)) for s in cross)
    assert not any(s.startswith("encoder.") for s in tr.sites)


def test_cache_generation_and_stitching_agree(dec, encdec):
    for lm, inp in ((dec, dec.encode(TEXT)), (encdec, encdec.encode("the", "the cat sat ."))):
        rep = M.cache_generation(lm, inp, 6)
        assert rep["passed"] and len(rep["steps"]) == 6 and rep["max_abs_logits"] <= TOL_CACHE
        assert rep["cached"] == rep["uncached"]
        st = M.cache_stitched(lm, inp)
        T = inp.ids.shape[1]
        for site in st["sites"].values():
            assert site["stitched"].shape == site["full"].shape and site["stitched"].shape[1] == T
            assert np.abs(site["stitched"] - site["full"]).max() <= TOL_CACHE


def test_prefix_stability_is_exact_for_causal_models(dec):
    ps = M.prefix_stability(dec, dec.encode(TEXT))
    assert ps["lengths"].tolist() == list(range(1, ps["T"] + 1))
    assert max(ps["rows"].max(), ps["keys"].max(), ps["values"].max()) <= TOL_CACHE
    with pytest.raises(ValueError, match="both ways"):
        enc = load("random-encoder")
        M.prefix_stability(enc, enc.encode(TEXT))


def test_cache_costs_quadratic_vs_linear():
    c = M.cache_costs(4, 3, 1, 1)
    assert c["uncached"].tolist() == [16, 16 + 25, 16 + 25 + 36]
    assert c["cached"].tolist() == [16, 16 + 5, 16 + 5 + 6]


def test_time_attention_rows_and_memory():
    rows = M.time_attention((32, 64), n_heads=2, d_head=8, repeats=2, budget_s=0.0)
    assert [(r["T"], r["backend"]) for r in rows] == [(t, b) for t in (32, 64) for b in ("eager", "sdpa", "flash")]
    by = {(r["T"], r["backend"]): r for r in rows}
    assert all(r["ms"] > 0 and r["runs"] >= 2 for r in rows)
    assert by[(64, "eager")]["peak_bytes"] >= by[(64, "eager")]["matrix_bytes"]  # eager holds the T×T matrix
    assert by[(64, "flash")]["peak_bytes"] < by[(64, "eager")]["matrix_bytes"]


def test_read_benchmarks(tmp_path):
    assert M.read_benchmarks([tmp_path / "none.json"]) is None
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"machine": "x", "results": [
        {"model": "gpt2", "mode": "fused", "T": 128, "median_s": 0.5, "peak_mb": 100.0},
        {"model": "gpt2", "mode": "eager_capture", "seq_len": 1024, "median_ms": 1500, "peak_bytes": 2**21}]}))
    got = M.read_benchmarks([p])
    assert got["machine"] == "x"
    assert got["rows"] == [
        {"model": "gpt2", "mode": "fused", "T": 128, "median_s": 0.5, "peak_mb": 100.0, "series": "gpt2 · fused"},
        {"model": "gpt2", "mode": "eager_capture", "T": 1024, "median_s": 1.5, "peak_mb": 2.0,
         "series": "gpt2 · eager_capture"}]
    # the layout `attnlab bench --json` writes: results rows with time_s and peak bytes; skipped rows have no time
    p.write_text(json.dumps({"schema": 1, "machine": {"cpu": "x"}, "lazy": [{"model": "m", "T": 128, "time_s": 1.0}],
                             "results": [{"model": "m", "T": 128, "mode": "fused", "time_s": 0.25, "times_s": [0.25],
                                          "peak_above_baseline_bytes": 3 * 2**20, "peak_rss_bytes": 2**30},
                                         {"model": "m", "T": 4096, "mode": "eager_capture", "skipped": "too big"}]}))
    assert [(r["mode"], r["T"], r["median_s"], r["peak_mb"]) for r in M.read_benchmarks([p])["rows"]] == [
        ("fused", 128, 0.25, 3.0)]
    p.write_text("{not json")
    assert M.read_benchmarks([p])["rows"] == []


def test_multi_head_steps_split_and_concatenate():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 5, 4))
    mask = np.tril(np.ones((5, 5), bool))
    steps, out = M.multi_head_steps(q, k, v, 2, mask)
    assert out.shape == (5, 4) and len(steps) == 2
    assert np.allclose(out[:, 2:], attention_steps(q[:, 2:], k[:, 2:], v[:, 2:], mask=mask).output)
    assert steps[0].scale == pytest.approx(1 / np.sqrt(2))
    with pytest.raises(ValueError, match="divisible"):
        M.multi_head_steps(q, k, v, 3)


def test_explain_weight_lecture_quiz():
    s = attention_steps(scores=[[1, 0, -1, -1], [1, 1, -1, 0], [0, 1, 1, -1], [-1, -1, 2, 1]],
                        mask=np.tril(np.ones((4, 4), bool)))
    e = M.explain_weight(s, 1, 1)
    assert e["weight"] == pytest.approx(0.5) and e["visible"].tolist() == [True, True, False, False]
    assert M.explain_weight(s, 1, 3)["masked"] and M.explain_weight(s, 1, 3)["weight"] == 0


def test_positions():
    sin = M.sinusoidal(10, 8)
    assert sin.shape == (10, 8) and np.allclose(sin[0, 1::2], 1)
    assert np.allclose(np.diag(M.similarity(sin)), 1, atol=1e-6)
    r = M.rope_demo(16, 20)
    assert r["spread_rope"].max() < 1e-4 < 1e-2 < r["spread_abs"].max()  # relative vs absolute
    assert np.allclose(r["diagonals"][:, 1:], r["diagonals"][:, :1], atol=1e-4)
    a = M.alibi(4, 5)
    assert np.allclose(a["bias"][0, 4], -0.25 * np.array([4, 3, 2, 1, 0]))
    assert np.allclose(a["last_weights"].sum(-1), 1) and a["last_weights"][0, -1] > a["last_weights"][3, -1]
    kind, table = M.position_table(load("random-decoder"))
    assert kind == "learned" and table.shape == (256, 64)
