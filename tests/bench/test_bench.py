"""The benchmark's own wiring: worker jobs in and out of process, the memory prediction, the targets and
tables, and the `attnlab bench` command end to end (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.bench_report import read_benchmarks
from attnlab.bench import forward as F
from attnlab.bench import worker as W
from attnlab.bench.payload import PAGES
from attnlab.bench.runner import run_job
from attnlab.bench.specs import MODES, predicted_bytes, save_gpt2_weights
from attnlab.bench.tables import markdown
from attnlab.bench.targets import evaluate_targets
from attnlab.model import hooks

ROOT = Path(__file__).resolve().parents[2]


TINY_GPT2 = dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4)


@pytest.fixture(scope="module")
def gpt2_spec(tmp_path_factory):
    path = save_gpt2_weights(tmp_path_factory.mktemp("w"), config=TINY_GPT2)
    return {"name": "gpt2-tiny", "source": "gpt2", "hf_config": TINY_GPT2, "weights": str(path)}


def test_ours_and_transformers_gpt2_share_the_weights(gpt2_spec):
    ours, vocab = F.load_ours_gpt2(gpt2_spec)
    hf, _ = F.load_hf_gpt2(gpt2_spec)
    x = F.token_ids(40, vocab)
    with torch.no_grad():
        fused = F.forward_fn("fused", ours, hf, x)()
        logits, cap = F.forward_fn("eager_capture", ours, hf, x)()
        out_e = F.forward_fn("hf_eager_attentions", ours, hf, x)()
        out_s = F.forward_fn("hf_sdpa", ours, hf, x)()
    torch.testing.assert_close(fused, out_s.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits, out_e.logits, atol=1e-4, rtol=1e-4)
    for site, a in zip(cap.sites, out_e.attentions):  # the same attention weights as transformers' eager
        np.testing.assert_allclose(cap[site].pattern(), a[0].numpy(), atol=1e-5)


def test_worker_jobs_in_process(gpt2_spec):
    res = W.job_time({**gpt2_spec, "T": 16, "modes": list(MODES), "repeats": 2, "warmup": 1})
    assert set(res["time_s"]) == set(MODES) and all(len(v) == 2 for v in res["times_s"].values())
    assert all(len(v) == 2 and min(v) > 0 for v in res["cpu_times_s"].values())
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


def test_worker_job_runs_in_its_own_process(gpt2_spec):
    res = run_job({**gpt2_spec, "job": "time", "T": 8, "modes": ["fused", "lazy_capture"], "repeats": 1,
                   "warmup": 0}, timeout_s=600)
    assert "error" not in res, res
    assert set(res["time_s"]) == {"fused", "lazy_capture"} and res["job_wall_s"] > 0
    assert run_job({**gpt2_spec, "job": "time", "T": 8, "modes": ["no-such-mode"], "repeats": 1,
                    "warmup": 0}, timeout_s=600)["error"].startswith("exit 1")


def test_predicted_memory_orders_the_modes():
    cfg = {"layers": 12, "heads": 12, "d_model": 768, "vocab": 50257}
    p = {m: predicted_bytes(cfg, m, 4096) for m in MODES}
    assert p["fused"] < p["lazy_capture"] < p["fused"] + 1e9 < p["hf_eager_attentions"] == p["eager_capture"]
    assert 12 * 12 * 4096**2 * 4 < p["eager_capture"] < 1.5 * 12 * 12 * 4096**2 * 4  # 9.7 GB of maps, held once


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


def test_smollm2_target_is_judged_per_round_at_128_and_512():
    out = fake_results()
    assert not [x for x in evaluate_targets(out) if x["name"].startswith("smollm2")]  # not in this run
    out["models"]["smollm2"] = {"cfg": {"layers": 30, "heads": 9, "d_model": 576, "vocab": 49152, "context": 8192},
                                "about": "s", "lengths": [128, 512], "modes": ["fused", "lazy_capture"]}
    for T, fused, lazy in ((128, [1.0, 2.0, 1.0], [1.04, 2.2, 1.03]), (512, [4.0, 4.0, 8.0], [4.4, 4.4, 8.0])):
        for m, times in (("fused", fused), ("lazy_capture", lazy)):
            out["results"].append({"model": "smollm2", "T": T, "mode": m, "times_s": times,
                                   "time_s": sorted(times)[1], "cpu_times_s": [x / 2 for x in times]})
    t = {x["name"]: x for x in evaluate_targets(out)}
    assert t["smollm2 lazy_capture / fused at T=128"]["measured"] == 1.04  # ratios 1.04, 1.1, 1.03
    assert t["smollm2 lazy_capture / fused at T=128"]["passed"] is True
    assert t["smollm2 lazy_capture / fused at T=128"]["note"].endswith("CPU-time ratio 1.040")
    assert t["smollm2 lazy_capture / fused at T=512"]["measured"] == 1.1 and not t[
        "smollm2 lazy_capture / fused at T=512"]["passed"]
    out["payload"] = [{"page": "masks", "T": 512, "bytes": 900_000, "model": "random-long-decoder"},
                      {"page": "masks", "T": 512, "bytes": 2_500_000, "model": "smollm2"}]
    t = {x["name"]: x for x in evaluate_targets(out)}
    pay = t["every page's Plotly payload at every T"]
    assert pay["passed"] is False and pay["note"] == "over: masks (smollm2) T=512 (2.5 MB)"
    out["targets"] = list(t.values())
    md = markdown(out)
    assert "| masks | 0.90 |" in md and "| masks (smollm2) | 2.50 |" in md


def test_cli_registers_bench():
    from attnlab.cli.main import build_parser

    args = build_parser().parse_args(["bench", "--quick", "--json", "--out", "x.json"])
    assert args.quick and args.out == "x.json"


@pytest.mark.slow
def test_bench_quick_writes_valid_json(tmp_path):
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, "-m", "cli", "bench", "--quick", "--json", "--out", str(out)],
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
    got = read_benchmarks(out)  # the schema's one reader reads what bench writes
    assert got is not None and got["machine"] == data["machine"]
    assert {(r["model"], r["T"], r["mode"]) for r in got["rows"]} >= {("gpt2-small", T, m) for T in (128, 1024)
                                                                        for m in MODES}
    assert {(p["page"], p["T"]) for p in got["payload"]} == {(pg, T) for pg in PAGES for T in (128, 1024)}
