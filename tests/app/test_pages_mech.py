"""The KV cache and Backends pages with AppTest (their verdicts against `attnlab check`), and what every
mechanics page shares: markup stays text, presentation mode, navigation from an encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from attnlab.analysis.machinery.checks import TOL_BACKEND, TOL_CACHE
from attnlab.cli.main import main as attnlab
from attnlab.model.registry import bundled_names

from tests.app.conftest import arr, ok, open_page, specs, titled, z_of

TEXT = "abc def ghij"
ENCDEC = "lecture-encdec" if "lecture-encdec" in bundled_names() else "random-encdec"


@pytest.fixture(scope="module")
def check_json():
    """`attnlab check --json` for (model, text, src), as the command prints it."""
    import contextlib
    import io

    def run(model: str, text: str, src: str | None = None) -> dict[str, dict]:
        out = io.StringIO()
        args = ["check", "--model", model, "--text", text, "--json"] + (["--src-text", src] if src else [])
        with contextlib.redirect_stdout(out):
            attnlab(args)
        return {c["name"]: c for c in json.loads(out.getvalue())["checks"]}

    return run


def verdicts(at, index: int = 0) -> dict[str, dict]:
    df = at.dataframe[index].value
    return {r["check"]: r for r in df.to_dict("records")}


def same_as_check(page_rows: dict, cli: dict, names) -> None:
    for n in names:
        assert page_rows[n]["value"] == cli[n]["value"], n
        assert page_rows[n]["tolerance"] == cli[n]["tolerance"], n
        assert page_rows[n]["verdict"].endswith("PASS") == cli[n]["passed"], n


# -- KV cache ---------------------------------------------------------------------------------------------
def test_kv_cache_verdict_equals_attnlab_check_and_figures(check_json):
    at = open_page("kv_cache", model="random-decoder", text=TEXT, kv_n=5, kv_layer=0, kv_head=1)
    ok(at)
    names = ("cache_vs_no_cache_logits", "cache_vs_no_cache_pattern", "greedy_cache_tokens_equal")
    same_as_check(verdicts(at), check_json("random-decoder", TEXT), names)
    steps = at.dataframe[1].value
    assert len(steps) == 5 and steps["passed"].all() and (steps["max_abs_logits"] <= TOL_CACHE).all()
    bars = titled(at, "per step")["data"][0]
    assert len(arr(bars["x"])) == 5 and (arr(bars["customdata"]) <= TOL_CACHE).all()
    T = len(TEXT) + 1  # [BOS] + bytes
    stitched, full = (z_of(titled(at, t)["data"][0]) for t in ("stitched from the cached steps", "one uncached pass"))
    assert stitched.shape == full.shape == (T, T)
    assert np.isnan(full[np.triu_indices(T, 1)]).all()  # causal mask shown as NaN
    assert np.nanmax(np.abs(stitched - full)) <= TOL_CACHE
    prefix = titled(at, "one more token at a time")
    assert [t["name"] for t in prefix["data"]] == ["attention rows of earlier tokens", "their keys", "their values"]
    assert at.query_params["kv_n"] == "5" and at.query_params["kv_head"] == "1"
    assert "blocks.0.attn, head 1" in " ".join(c.value for c in at.caption)


def test_kv_cache_encoder_decoder_cross_rows_and_encoder_switch():
    at = open_page("kv_cache", model="random-encdec", text="le", src="the cat", kv_n=3, kv_group="cross")
    ok(at)
    src_len = len("the cat") + 1  # bytes + [EOS]
    assert z_of(titled(at, "one uncached pass")["data"][0]).shape == (3, src_len)  # [BOS] l e × source
    at = open_page("kv_cache", model="random-encoder", text=TEXT, kv_n=2)  # an encoder has no cache: its own model
    assert not at.exception
    assert at.query_params["model"] == "random-encoder"  # the session keeps its model
    assert any("this page alone uses **lecture-decoder**" in i.value for i in at.info)


def test_kv_cache_default_view_agrees_with_attnlab_check_pass_or_fail(check_json):
    """The default model and preset: the page says what `attnlab check` says, even when that is FAIL (a fixed
    absolute tolerance against large logits) — and puts the difference in scale."""
    at = open_page("kv_cache", kv_n=2)
    assert not at.exception
    names = ("cache_vs_no_cache_logits", "cache_vs_no_cache_pattern", "greedy_cache_tokens_equal")
    same_as_check(verdicts(at), check_json(at.query_params["model"], at.session_state["text"]), names)
    assert any("For scale: the logits of this input reach" in c.value for c in at.caption)


# -- Backends ---------------------------------------------------------------------------------------------
def test_backends_verdict_equals_attnlab_check_kernels_and_live_costs(check_json):
    at = open_page("backends", model="random-decoder", text=TEXT, be_max=256, be_layer=1, be_head=2)
    ok(at)
    cli = check_json("random-decoder", TEXT)
    rows = verdicts(at)
    same_as_check(rows, cli, ("eager_vs_sdpa", "eager_vs_flash"))
    assert rows["eager_vs_flash"]["note"] == cli["eager_vs_flash"]["note"]
    if not torch.cuda.is_available():
        assert "PyTorch fused CPU kernel" in rows["eager_vs_flash"]["note"]
        assert any("no CUDA GPU" in i.value and "FlashAttention-2" in i.value for i in at.info)
    grid = titled(at, "Max |Δ pattern| per layer")["data"][0]
    assert np.nanmax(arr(grid["customdata"])) <= TOL_BACKEND
    live = titled(at, "Live: one causal attention call")
    by = {}
    for t in live["data"]:
        by.setdefault(t["name"], []).append(t)
    assert set(by) == {"eager", "sdpa", "flash", "one H×T×T float32 matrix"}
    assert arr(by["eager"][0]["x"]).tolist() == [64, 128, 256]
    mem = {n: arr(ts[-1]["y"]) for n, ts in by.items() if n != "one H×T×T float32 matrix"}
    assert (mem["eager"] > mem["flash"]).all()  # eager keeps T×T matrices, the fused kernel does not
    assert any("best time of 7 calls per point" in c.value for c in at.caption)  # mechanics.attention_timings' count
    (rec,) = [d.value for d in at.dataframe if "lazy" in d.value.columns]  # the recovery table
    assert rec["lazy"].all() and (rec["max_abs_pattern"] <= TOL_BACKEND).all()
    d = z_of(titled(at, "difference")["data"][0])
    assert np.nanmax(np.abs(d)) <= TOL_BACKEND
    assert "blocks.1.attn, head 2" in " ".join(c.value for c in at.caption)


def test_backends_reads_the_benchmark_json(tmp_path, monkeypatch):
    from attnlab.app import mechanics

    bench = tmp_path / "benchmarks.json"
    bench.write_text(json.dumps({"schema": "attnlab-bench/1", "machine": {"cpu": "test cpu"}, "results": [
        {"model": "gpt2-small", "T": T, "mode": mode, "time_s": t, "peak_above_baseline_bytes": b}
        for T, mode, t, b in ((1024, "fused", 0.5, 2**27), (4096, "fused", 3.0, 2**28),
                              (1024, "eager_capture", 0.9, 2**30), (4096, "eager_capture", 9.0, 2**33))]}))
    monkeypatch.setattr(mechanics, "BENCH_FILE", bench)
    mechanics.benchmark_results.clear()
    try:
        at = open_page("backends", model="random-decoder", text=TEXT, be_max=256)
        ok(at)
        fig = titled(at, "Benchmark: time and peak memory per mode")
        names = {t["name"] for t in fig["data"]}
        assert names == {"gpt2-small · fused", "gpt2-small · eager_capture"}
        assert "test cpu" in " ".join(m.value for m in at.markdown)
    finally:
        mechanics.benchmark_results.clear()


def test_page_verdicts_are_run_checks_values():
    """The KV-cache and Backends pages call one check each (analysis.machinery.checks); their verdict rows carry exactly
    the values, tolerances and verdicts `run_checks` (= `attnlab check`) gives for those checks."""
    from attnlab.analysis.machinery.checks import run_checks
    from attnlab.model.registry import load

    lm = load("random-decoder")
    want = {c["name"]: c for c in run_checks(lm, lm.encode(TEXT))["checks"]}
    for page, names in (("kv_cache", ("cache_vs_no_cache_logits", "cache_vs_no_cache_pattern",
                                      "greedy_cache_tokens_equal")),
                        ("backends", ("eager_vs_sdpa", "eager_vs_flash"))):
        at = open_page(page, model="random-decoder", text=TEXT, kv_n=2, be_max=256)
        ok(at)
        rows = verdicts(at)
        assert list(rows) == list(names), page
        for n in names:
            assert rows[n]["value"] == want[n]["value"], n
            assert rows[n]["tolerance"] == want[n]["tolerance"], n
            assert rows[n]["verdict"].endswith("PASS") == want[n]["passed"], n
            assert rows[n]["note"] == want[n].get("note", ""), n


# -- all six: markup stays text, presentation mode -------------------------------------------------------
@pytest.mark.parametrize("page", ["kv_cache", "generate"])
def test_markup_in_tokens_is_escaped(page):
    at = open_page(page, model="random-decoder", text="<b>x</b> & y", kv_n=2, gen_n=2)
    ok(at)
    ticks = [tt for s in specs(at) for ax in ("xaxis", "yaxis") for tt in (s["layout"].get(ax, {}).get("ticktext") or [])]
    assert "&lt;" in ticks and "&amp;" in ticks and "<" not in ticks and "<b>" not in " ".join(ticks)


def test_presentation_mode_on_mechanics_pages():
    at = open_page("step_by_step", present=1)
    ok(at)
    assert titled(at, "④ Softmax")["layout"]["font"]["size"] == 18
    assert not at.expander[0].proto.expanded  # options folded away


VERDICT_FAILS = ("beyond the tolerance", "Some steps differ")  # a FAIL of `attnlab check`, shown as such


def test_mechanics_pages_through_navigation_from_an_encoder():
    """From the entry script with an encoder chosen, every mechanics page runs, switching to a decoder or an
    encoder–decoder where it must (the per-page tests cover decoders and encoder–decoders)."""
    at = open_page(None, model="random-encoder")
    ok(at)
    for page in ("backends", "positions", "step_by_step", "kv_cache", "generate", "cross_attention"):
        at.switch_page(f"../pages/{page}.py").run()
        assert not at.exception, (page, [e.message for e in at.exception])
        assert all(any(f in e.value for f in VERDICT_FAILS) for e in at.error), (page, [e.value for e in at.error])
        assert specs(at), page


def test_sidebar_says_where_models_run_and_offers_no_switch_without_cuda(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the sidebar offers a switch")
    monkeypatch.delenv("ATTNLAB_DEVICE", raising=False)
    monkeypatch.delenv("ATTNLAB_DTYPE", raising=False)
    at = open_page("backends")
    assert not at.exception
    captions = [c.value for c in at.sidebar.caption]
    assert "Runs on **cpu** in **float32** (no CUDA GPU on this machine)." in captions
    labels = [w.label for w in at.sidebar.selectbox]
    assert "Device" not in labels and "Precision" not in labels
    assert "What a GPU adds" in " ".join(m.value for m in at.markdown)
