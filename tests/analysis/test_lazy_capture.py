"""What `attnlab bench` measures is right: lazy patterns equal eager ones, pooled overviews equal pooling
the full matrix, the streamed rollout equals the full rollout; and the benchmark's own wiring."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.bench import evaluate_targets, markdown
from analysis.bench import worker as W
from analysis.bench.runner import MODES, predicted_bytes, save_gpt2_weights
from analysis.longinput import exact_window, overview, rollout_query
from analysis.pooling import pool_matrix
from analysis.rollout import attention_rollout
from model import hooks
from model.config import ModelConfig
from model.longinput import (
    _weighted_columns_fused,
    full_pattern,
    iter_pattern_rows,
    pattern_rows,
    visible_columns,
    weighted_columns,
)
from model.masks import MaskSpec
from model.record import AttentionRecord
from model.transformer import build_model

ROOT = Path(__file__).resolve().parents[2]


def tiny(seed=0, **kw):
    cfg = ModelConfig(**{**dict(vocab_size=61, d_model=32, n_heads=4, n_layers=3, max_len=96), **kw})
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():  # larger weights than the init: peaked rows, so differences would show
        for p in model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    return model


def ids(T, vocab=61, seed=1):
    return torch.randint(0, vocab, (1, T), generator=torch.Generator().manual_seed(seed))


def capture(model, x, backend, **kw):
    with torch.no_grad(), hooks.capture() as cap:
        model(x, backend=backend, **kw)
    return [cap[s] for s in cap.sites]


def peaked_records(T=70, layers=3, heads=4, d=16, seed=0, mask="causal"):
    """Synthetic lazy records with peaked rows; mask 'causal', 'none', 'window' or 'dead' (rows 0 and 5 see nothing)."""
    rng = np.random.default_rng(seed)
    m = {"causal": np.tri(T, dtype=bool), "none": None,
         "window": np.tri(T, dtype=bool) & ~np.tri(T, k=-5, dtype=bool)}.get(mask)
    if mask == "dead":
        m = np.tri(T, dtype=bool)
        m[[0, 5]] = False
    out = []
    for i in range(layers):
        q, k = (rng.standard_normal((1, heads, T, d)).astype(np.float32) * 2 for _ in range(2))
        out.append(AttentionRecord(f"blocks.{i}.attn", "decoder", i, "self", "sdpa", "test", d ** -0.5, 0, q, k,
                                   None if m is None else m[None]))
    return out


def eager_stack(records):
    return np.stack([r.pattern() for r in records])  # [L, H, T, T] through the record's numpy path


# -- lazy patterns equal eager patterns ------------------------------------------------------------------------
CASES = {
    "causal learned": (dict(), dict()),
    "rope": (dict(positional="rope"), dict()),
    "alibi": (dict(positional="alibi"), dict()),
    "sliding window": (dict(), dict(mask=MaskSpec("sliding_window", window=7))),
    "encoder padding": (dict(arch="encoder"), dict(attention_mask=torch.tensor([[1] * 50 + [0] * 10]))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lazy_patterns_equal_eager_patterns(case):
    cfg_kw, run_kw = CASES[case]
    model = tiny(**cfg_kw)
    x = ids(60)
    eager, lazy = capture(model, x, "eager", **run_kw), capture(model, x, "sdpa", **run_kw)
    for e, f in zip(eager, lazy):
        assert not e.lazy and f.lazy
        want = e.pattern()  # [H, T, T], stored by the eager backend
        np.testing.assert_allclose(f.pattern(), want, atol=2e-6)  # AttentionRecord (numpy) recompute
        np.testing.assert_allclose(full_pattern(f, block=17), want, atol=2e-6)  # model.longinput (torch, blocks)
        for h in range(f.n_heads):
            np.testing.assert_allclose(f.pattern(head=h), want[h], atol=2e-6)
            np.testing.assert_allclose(f.pattern(h, (5, 23, 3, 40)), want[h, 5:23, 3:40], atol=2e-6)
        if f.mask is not None:  # exact zeros where the mask forbids attention
            assert not full_pattern(f)[:, ~f.mask_for()].any()


def test_pattern_rows_trim_only_zero_columns():
    rec = peaked_records(mask="window")[0]
    full = rec.pattern()
    for b in iter_pattern_rows(rec, [1, 3], block=9):
        assert (b.k0, b.k1) == visible_columns(rec, b.q0, b.q1)
        np.testing.assert_allclose(b.rows, full[[1, 3], b.q0:b.q1, b.k0:b.k1], atol=2e-6)
        assert not full[:, b.q0:b.q1, :b.k0].any() and not full[:, b.q0:b.q1, b.k1:].any()
    dead = peaked_records(mask="dead")[0]
    p = pattern_rows(dead, 2).numpy()[0]
    assert not p[[0, 5]].any() and np.isfinite(p).all()  # a row with no visible key is all 0, not NaN
    with pytest.raises(IndexError):
        pattern_rows(rec, 4)


# -- pooled overviews equal pooling the full matrix ------------------------------------------------------------
@pytest.mark.parametrize("T, cells, mask", [(70, 512, "causal"), (70, 16, "causal"), (70, 7, "window"),
                                            (101, 10, "causal"), (64, 8, "none"), (50, 9, "dead")])
@pytest.mark.parametrize("how", ["max", "mean"])
@pytest.mark.parametrize("masked_nan", [True, False])
def test_overview_equals_pooling_the_full_matrix(T, cells, mask, how, masked_nan):
    rec = peaked_records(T=T, layers=1, mask=mask)[0]
    full, mask = rec.pattern(), rec.mask_for()
    ref_in = np.where(mask, full, np.nan) if masked_nan else full
    for h in range(rec.n_heads):
        got, qe, ke = overview(rec, h, cells, how, masked_nan=masked_nan, block_rows=13)
        want, wqe, wke = pool_matrix(ref_in[h], cells, how)
        assert np.array_equal(qe, wqe) and np.array_equal(ke, wke)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)
    every, _, _ = overview(rec, None, cells, how, masked_nan=masked_nan)  # all heads in one pass
    np.testing.assert_allclose(every, pool_matrix(ref_in, cells, how)[0], atol=1e-6, equal_nan=True)


def test_overview_of_a_real_lazy_capture():
    model = tiny()
    rec = capture(model, ids(90), "sdpa")[1]
    got, _, _ = overview(rec, 2, 20, "max")
    want = pool_matrix(np.where(rec.mask_for(), rec.pattern(2), np.nan), 20, "max")[0]
    np.testing.assert_allclose(got, want, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("mask", ["causal", "none", "window", "dead"])
def test_exact_window_equals_the_pattern_sliced(mask):
    rec = peaked_records(T=70, layers=1, mask=mask)[0]
    full = rec.pattern()
    for h, (q0, q1, k0, k1) in [(0, (0, 70, 0, 70)), (1, (40, 52, 3, 60)), (3, (5, 9, 30, 70)), (2, (69, 70, 0, 1))]:
        got, m = exact_window(rec, h, q0, q1, k0, k1)
        assert got.dtype == np.float32 and got.shape == (q1 - q0, k1 - k0)
        np.testing.assert_allclose(got, full[h, q0:q1, k0:k1], atol=1e-6)
        assert np.array_equal(m, rec.mask_for(0, (q0, q1, k0, k1))) and (got[~m] == 0).all()
    with pytest.raises(ValueError, match="non-empty"):
        exact_window(rec, 0, 10, 10, 0, 5)


# -- streamed rollout equals full rollout ----------------------------------------------------------------------
@pytest.mark.parametrize("mask", ["causal", "none", "window", "dead"])
@pytest.mark.parametrize("fused", [True, False])
def test_streamed_rollout_equals_full_rollout(mask, fused):
    recs = peaked_records(T=48, mask=mask)
    full = attention_rollout(eager_stack(recs))
    for q in (0, 5, 17, 47):
        np.testing.assert_allclose(rollout_query(recs, q, fused=fused), full[q], atol=1e-6)


@pytest.mark.parametrize("fusion, residual, discard", [("max", 0.5, 0.0), ("min", 0.3, 0.0), ("mean", 0.5, 0.4),
                                                       ("max", 0.7, 0.25), ("mean", 0.0, 0.0), ("mean", 1.0, 0.0)])
def test_streamed_rollout_options_equal_full_rollout(fusion, residual, discard):
    recs = peaked_records(T=40, mask="window")
    full = attention_rollout(eager_stack(recs), residual, fusion, discard)
    for q in (3, 39):
        np.testing.assert_allclose(rollout_query(recs, q, residual, fusion, discard), full[q], atol=1e-6)


def test_streamed_rollout_of_a_real_model():
    model = tiny(n_layers=4)
    lazy, eager = capture(model, ids(80), "sdpa"), capture(model, ids(80), "eager")
    full = attention_rollout(eager_stack(eager))
    np.testing.assert_allclose(rollout_query(lazy, 79), full[79], atol=1e-6)
    np.testing.assert_allclose(rollout_query(lazy, 40), full[40], atol=1e-6)


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_weighted_columns_fused_kernel_equals_blocks(mask):
    rec = peaked_records(T=100, layers=1, mask=mask)[0]
    r = np.random.default_rng(3).random(100)
    r[[7, 8]] = 0.0
    want = np.einsum("i,hij->hj", r, rec.pattern().astype(np.float64))
    np.testing.assert_allclose(weighted_columns(rec, r, fused=True), want, rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(_weighted_columns_fused(rec, r, mask == "causal", 0), want, rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(weighted_columns(rec, r, fused=False), want, rtol=1e-5, atol=1e-9)


# -- the benchmark's wiring ------------------------------------------------------------------------------------
TINY_GPT2 = dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4)


@pytest.fixture(scope="module")
def gpt2_spec(tmp_path_factory):
    path = save_gpt2_weights(tmp_path_factory.mktemp("w"), config=TINY_GPT2)
    return {"name": "gpt2-tiny", "source": "gpt2", "hf_config": TINY_GPT2, "weights": str(path)}


def test_ours_and_transformers_gpt2_share_the_weights(gpt2_spec):
    ours, vocab = W.load_ours_gpt2(gpt2_spec)
    hf, _ = W.load_hf_gpt2(gpt2_spec)
    x = W.token_ids(40, vocab)
    with torch.no_grad():
        fused = W.forward_fn("fused", ours, hf, x)()
        logits, cap = W.forward_fn("eager_capture", ours, hf, x)()
        out_e = W.forward_fn("hf_eager_attentions", ours, hf, x)()
        out_s = W.forward_fn("hf_sdpa", ours, hf, x)()
    torch.testing.assert_close(fused, out_s.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits, out_e.logits, atol=1e-4, rtol=1e-4)
    for site, a in zip(cap.sites, out_e.attentions):  # the same attention weights as transformers' eager
        np.testing.assert_allclose(cap[site].pattern(), a[0].numpy(), atol=1e-5)


def test_worker_jobs_in_process(gpt2_spec):
    res = W.job_time({**gpt2_spec, "T": 16, "modes": list(MODES), "repeats": 2, "warmup": 1})
    assert set(res["time_s"]) == set(MODES) and all(len(v) == 2 for v in res["times_s"].values())
    mem = W.job_memory({**gpt2_spec, "T": 32, "mode": "lazy_capture", "repeats": 1, "warmup": 0, "extras": True,
                        "max_cells": 8})
    assert mem["peak_rss_bytes"] >= mem["baseline_rss_bytes"] > 0
    ex = mem["extras"]
    assert ex["query"] == 31 and ex["lazy_bytes"] == 2 * 2 * 32 * 32 * 4  # q and k, 2 layers, float32
    assert all(ex[k] > 0 for k in ("head_pattern_s", "head_pattern_blocks_s", "overview_s", "rollout_s"))
    active = hooks.active
    hk = W.job_hooks({**gpt2_spec, "T": 8, "repeats": 3, "warmup": 0})
    assert hk["ratio"] > 0 and len(hk["off_times_s"]) == 3 and hk["sites"] == 2
    assert 1.0 <= hk["implied_ratio"] < 1.01
    assert hooks.active is active  # the patch is undone


def test_predicted_memory_orders_the_modes():
    cfg = {"layers": 12, "heads": 12, "d_model": 768, "vocab": 50257}
    p = {m: predicted_bytes(cfg, m, 4096) for m in MODES}
    assert p["fused"] < p["lazy_capture"] < p["fused"] + 1e9 < p["hf_eager_attentions"] < p["eager_capture"]
    assert 12 * 12 * 4096**2 * 4 < p["hf_eager_attentions"]  # 9.7 GB of maps


def fake_results():
    rows = []
    for T in (1024, 4096):
        for m, t, peak in (("fused", 10.0, 2e9), ("lazy_capture", 11.0, 2.4e9), ("eager_capture", 20.0, 9e9),
                           ("hf_eager_attentions", 25.0, 8e9), ("hf_sdpa", 12.0, 2e9)):
            rows.append({"model": "gpt2-small", "T": T, "mode": m, "time_s": t * T / 1024,
                         "times_s": [t * T / 1024] * 5, "baseline_rss_bytes": 1e9, "peak_rss_bytes": peak,
                         "peak_above_baseline_bytes": peak - 1e9})
    return {"machine": {"cpu": "x", "usable_cores": 2, "torch": "t", "torch_threads": 2, "transformers": "t",
                        "date": "d", "loadavg_start": [1.0, 1, 1], "loadavg_end": [1.0, 1, 1]},
            "settings": {"repeats": 5, "warmup": 1}, "results": rows,
            "models": {"gpt2-small": {"cfg": {"layers": 12, "heads": 12, "d_model": 768, "vocab": 50257,
                                              "context": 4096}, "about": "a", "lengths": [1024, 4096],
                                      "modes": list(MODES)}},
            "lazy": [{"model": "gpt2-small", "T": 4096, "head_pattern_s": 0.5, "head_pattern_blocks_s": 0.3,
                      "overview_s": 0.8, "rollout_s": 12.0, "lazy_bytes": 3e8, "lazy_resident_bytes": 4.5e8}],
            "hooks": {"model": "gpt2-small", "T": 128, "off_s": 1.0, "patched_s": 1.0, "ratio": 1.0,
                      "ratio_of_medians": 1.0, "off_times_s": [1.0] * 21, "sites": 12, "active_call_ns": 60.0,
                      "lambda_call_ns": 40.0, "implied_ratio": 1.0000002},
            "payload": [{"page": "heatmaps", "T": 4096, "bytes": 1_500_000}, {"page": "scores", "T": 4096,
                                                                               "bytes": 9_000_000, "estimated": True}]}


def test_targets_are_judged_as_measured():
    out = fake_results()
    t = {x["name"]: x for x in evaluate_targets(out)}
    assert t["lazy_capture / fused at T=1024"]["passed"] and t["lazy_capture / fused at T=1024"]["measured"] == 1.1
    assert t["eager_capture ≤ hf_eager_attentions at T=4096"]["passed"]
    assert t["lazy_capture peak memory over the model's own (fused) at T=4096"]["measured"] == 0.4
    assert t["pooled 512×512 overview of one head at T=4096"]["passed"]
    assert t["one query's rollout at T=4096"]["passed"] is False
    pay = t["every page's Plotly payload at every T"]
    assert pay["passed"] is False and "scores T=4096" in pay["note"] and "extrapolated" in pay["note"]
    out["targets"] = list(t.values())
    md = markdown(out)
    assert "| 4096 |" in md and "MISS" in md and "hook_overhead_ratio = 1.000" in md


def test_cli_registers_bench():
    from app.cli import build_parser

    args = build_parser().parse_args(["bench", "--quick", "--json", "--out", "x.json"])
    assert args.quick and args.out == "x.json"


@pytest.mark.slow
def test_bench_quick_writes_valid_json(tmp_path):
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, "-m", "app.cli", "bench", "--quick", "--json", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=4 * 3600)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    for key in ("schema", "machine", "settings", "models", "results", "lazy", "hooks", "hook_overhead_ratio",
                "payload", "targets"):
        assert key in data
    assert {"cpu", "cores", "torch", "date"} <= set(data["machine"])
    assert data["settings"]["lengths"] == [128, 1024] and data["settings"]["repeats"] >= 5
    got = {(r["model"], r["T"], r["mode"]) for r in data["results"]}
    assert {("gpt2-small", T, m) for T in (128, 1024) for m in MODES} <= got
    assert all("time_s" in r and "peak_rss_bytes" in r for r in data["results"] if r["model"] == "gpt2-small")
    assert isinstance(data["hook_overhead_ratio"], float)
    assert "| T |" in p.stdout
