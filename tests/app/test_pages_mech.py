"""The mechanics pages (KV cache, Backends, Step by step, Cross-attention, Positions, Generate) with AppTest:
main options, figures checked by their data, and the KV-cache and Backends verdicts against `attnlab check`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from analysis.checks import TOL_BACKEND, TOL_CACHE
from cli.main import main as attnlab
from model.registry import bundled_names
from tests.app.conftest import ok, open_page, specs, titled, z_of

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


def arr(v) -> np.ndarray:
    """A Plotly data array: a list, or numpy sent base64-encoded ('bdata')."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(np.float64)
    return np.asarray(v, dtype=np.float64)


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
    at = open_page("kv_cache", model="random-encoder", text=TEXT, kv_n=2)  # an encoder has no cache: switch
    assert not at.exception
    assert at.query_params["model"] in ("lecture-decoder", "random-decoder")
    assert any("switched from **random-encoder**" in i.value for i in at.info)


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
    (rec,) = [d.value for d in at.dataframe if "lazy" in d.value.columns]  # the recovery table
    assert rec["lazy"].all() and (rec["max_abs_pattern"] <= TOL_BACKEND).all()
    d = z_of(titled(at, "difference")["data"][0])
    assert np.nanmax(np.abs(d)) <= TOL_BACKEND
    assert "blocks.1.attn, head 2" in " ".join(c.value for c in at.caption)


def test_backends_reads_the_benchmark_json(tmp_path, monkeypatch):
    from app import state

    bench = tmp_path / "benchmarks.json"
    bench.write_text(json.dumps({"schema": "attnlab-bench/1", "machine": {"cpu": "test cpu"}, "results": [
        {"model": "gpt2-small", "T": T, "mode": mode, "time_s": t, "peak_above_baseline_bytes": b}
        for T, mode, t, b in ((1024, "fused", 0.5, 2**27), (4096, "fused", 3.0, 2**28),
                              (1024, "eager_capture", 0.9, 2**30), (4096, "eager_capture", 9.0, 2**33))]}))
    monkeypatch.setattr(state, "BENCH_FILE", bench)
    state.benchmark_results.clear()
    try:
        at = open_page("backends", model="random-decoder", text=TEXT, be_max=256)
        ok(at)
        fig = titled(at, "Benchmark: time and peak memory per mode")
        names = {t["name"] for t in fig["data"]}
        assert names == {"gpt2-small · fused", "gpt2-small · eager_capture"}
        assert "test cpu" in " ".join(m.value for m in at.markdown)
    finally:
        state.benchmark_results.clear()


def test_page_verdicts_are_run_checks_values():
    """The KV-cache and Backends pages call one check each (analysis.checks); their verdict rows carry exactly
    the values, tolerances and verdicts `run_checks` (= `attnlab check`) gives for those checks."""
    from analysis.checks import run_checks
    from model.registry import load

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


# -- Step by step -----------------------------------------------------------------------------------------
def _texts(fig) -> np.ndarray:
    return np.array(fig["data"][0]["text"])


def test_step_by_step_lecture_example_and_quiz():
    at = open_page("step_by_step")
    ok(at)
    w = _texts(titled(at, "④ Softmax"))
    assert w.shape == (4, 4) and w[1, 1] == "0.500" and w[1, 0] == "0.500" and (w[0, 1:] == "0.000").all()
    masked = titled(at, "③ Masked")
    assert masked["data"][1]["text"].count("−∞") == 6  # above the causal diagonal
    at.toggle(key="sbs_quiz").set_value(True).run()
    ok(at)
    assert _texts(titled(at, "④ Softmax"))[1, 1] == "?"  # hidden until answered
    assert at.query_params["sbs_ask"] == "2,2"
    at.number_input(key="sbs_answer").set_value(0.4).run()
    assert at.error and "α_2,2 = 0.500" in at.error[0].value
    assert any("exp values" in m.value and "**0.500**" in m.value for m in at.markdown)
    at.number_input(key="sbs_answer").set_value(0.5).run()
    ok(at)
    assert at.success[0].value == "Correct: α_2,2 = 0.500."
    at.button[1].click().run()  # another question: a new cell, the answer cleared
    ok(at)
    assert at.query_params["sbs_ask"] != "2,2" and at.number_input(key="sbs_answer").value is None


def test_step_by_step_url_matrix_mask_and_multi_head():
    scores = "0,1,2;2,1,0;1,1,1"
    at = open_page("step_by_step", sbs_T=3, sbs_scores=scores, sbs_mask="none", sbs_v="1,0;0,1;1,1", sbs_dk=4)
    ok(at)
    s = np.array([[0, 1, 2], [2, 1, 0], [1, 1, 1]], float) / 2  # d_k = 4: × 1/2
    e = np.exp(s - s.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    assert np.allclose(_texts(titled(at, "④ Softmax")).astype(float), want, atol=5e-4)
    assert at.query_params["sbs_scores"] == scores
    at = open_page("step_by_step", sbs_mode="qkv", sbs_heads=2, sbs_mask="padding")
    ok(at)
    heads = [titled(at, f"head {h}: α") for h in (1, 2)]
    for f in heads:
        w = _texts(f).astype(float)
        assert w.shape == (4, 4) and np.allclose(w[:, 3], 0) and np.allclose(w.sum(1), 1, atol=0.02)  # 2 decimals
    assert _texts(titled(at, "Concatenated heads")).shape == (4, 4)
    assert "d_head" in " ".join(h.value for h in at.subheader)
    assert "× 0.707" in titled(at, "② Scaled")["layout"]["title"]["text"]  # 1/√2 per head


# -- Cross-attention --------------------------------------------------------------------------------------
def test_cross_attention_matrices_and_replay():
    at = open_page("cross_attention", model=ENCDEC, x_head=1, x_n=4, x_step=2)
    ok(at)
    from model.registry import load

    lm = load(ENCDEC)
    src, tgt = at.session_state["src"], at.session_state["text"]
    enc = lm.encode(tgt, src)
    S, T = len(enc.src_tokens), len(enc.tokens)
    cross = titled(at, "cross-attention, layer")
    assert z_of(cross["data"][0]).shape == (T, S) and "head 1" in cross["layout"]["title"]["text"]
    assert cross["layout"]["xaxis"]["title"]["text"] == "source token (key)"
    self_ = z_of(titled(at, "decoder self-attention")["data"][0])
    assert self_.shape == (T, T) and np.isnan(self_[np.triu_indices(T, 1)]).all()
    mosaic = titled(at, "cross-attention: target tokens")
    assert mosaic["layout"]["meta"]["heads"] == lm.cfg.n_heads
    replay = titled(at, "all steps: source tokens read")
    n = replay["layout"]["meta"]["steps"]
    assert 1 <= n <= 4 and replay["layout"]["meta"]["keys"] == S and len(replay.get("frames", [])) in (0, n)
    assert z_of(titled(at, "step 2: cross-attention")["data"][0]).shape == (lm.cfg.n_heads + 1, S)


def test_cross_attention_switches_a_decoder_to_an_encoder_decoder():
    at = open_page("cross_attention", model="random-decoder")
    ok(at)
    assert at.query_params["model"].endswith("encdec")


# -- Positions --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "rope", "alibi"])
def test_positions_schemes(scheme):
    at = open_page("positions", model="random-decoder", pos_scheme=scheme, pos_n=16, pos_model="minilm")
    ok(at)
    if scheme == "sinusoidal":
        assert z_of(titled(at, "PE [16 positions × 64 dims]")["data"][0]).shape == (16, 64)
    elif scheme == "learned":
        fig = titled(at, "minilm: position embeddings")  # a trained BERT-style table
        assert z_of(fig["data"][0]).shape == (16, 384)
        assert "no vector for position 512" in " ".join(c.value for c in at.caption)
        sim = z_of(titled(at, "cosine similarity between positions")["data"][0])
        assert sim[5, 6] > sim[5, 15]  # trained: neighbours are more alike than distant positions
    elif scheme == "rope":
        spread = {t["name"]: arr(t["y"]) for t in titled(at, "Spread of the scores")["data"]}
        assert spread["RoPE"].max() < 1e-4 and spread["absolute (sinusoidal added)"].max() > 1e-2
        S = z_of(titled(at, "RoPE: rot")["data"][0])
        assert np.allclose(np.diagonal(S, -3), np.diagonal(S, -3)[0], atol=1e-4)  # constant along a diagonal
    else:
        fig = titled(at, "ALiBi bias per head")
        assert fig["layout"]["meta"]["heads"] == 4
        assert at.dataframe[0].value["slope m_h"].tolist() == pytest.approx([0.25, 0.0625, 0.015625, 0.00390625])
    assert at.query_params["pos_scheme"] == scheme


@pytest.mark.parametrize("model", sorted({ENCDEC, "random-decoder"}))
def test_positions_default_is_the_model_in_use(model):
    from model.registry import load

    cfg = load(model).cfg
    at = open_page("positions", model=model)
    ok(at)
    assert at.query_params["pos_scheme"] == (cfg.positional if cfg.positional != "none" else "sinusoidal")
    if cfg.positional == "sinusoidal":
        assert any("adds exactly this table" in s.value for s in at.success)
    elif cfg.positional == "learned":  # the model's own table, first
        assert at.query_params["pos_model"] == model
        fig = titled(at, f"{model}: position embeddings")
        assert z_of(fig["data"][0]).shape == (min(48, cfg.max_len), cfg.d_model)


# -- Generate ---------------------------------------------------------------------------------------------
def test_generate_greedy_replay_and_step():
    at = open_page("generate", model="random-decoder", text=TEXT, gen_n=6, gen_step=2, gen_head=0)
    ok(at)
    T0 = len(TEXT) + 1
    fig = titled(at, "Each new token's attention")
    z = z_of(fig["data"][0])
    assert z.shape == (6, T0 + 5) and len(fig["frames"]) == 6
    for s in range(6):  # step s sees keys 0..T0+s−1, rows sum to 1
        assert np.isnan(z[s, T0 + s:]).all() and np.nansum(z[s]) == pytest.approx(1, abs=1e-4)
    assert fig["layout"]["yaxis"]["ticktext"][0].startswith("0 →")
    step = z_of(titled(at, "query ")["data"][0])
    assert step.shape == (4 + 1, T0 + 2)  # heads + mean, keys up to the step's query
    assert "greedy" in " ".join(m.value for m in at.markdown)
    probs = at.dataframe[0].value["probability"]
    assert len(probs) == 5 and (np.diff(probs) <= 1e-7).all()


def test_generate_sampling_is_seeded_and_bookmarkable():
    params = dict(model="random-decoder", text=TEXT, gen_n=5, gen_temp=1.2, gen_topk=3, gen_seed=4)
    a, b = open_page("generate", **params), open_page("generate", **params)
    ok(a)
    strip = [h.proto.body for h in a.get("html") if 'class="strip"' in h.proto.body][0]
    assert strip == [h.proto.body for h in b.get("html") if 'class="strip"' in h.proto.body][0]
    assert a.dataframe[0].value["probability"].iloc[3:].sum() == pytest.approx(0)  # top-3: the rest is 0
    assert "sampled at temperature 1.2, top-3, seed 4" in " ".join(m.value for m in a.markdown)
    assert {k: a.query_params[k] for k in ("gen_temp", "gen_topk", "gen_seed")} == {
        "gen_temp": "1.2", "gen_topk": "3", "gen_seed": "4"}


def test_generate_encoder_decoder_cross_attention():
    at = open_page("generate", model="random-encdec", text="", src="the cat", gen_n=3, gen_group="cross")
    ok(at)
    fig = titled(at, "Each new token's attention")
    assert fig["layout"]["xaxis"]["title"]["text"] == "source token (key)"
    assert z_of(fig["data"][0]).shape[1] == len("the cat") + 1


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
