"""The Long inputs page (issue #8): a 4,096-token fused capture of random-long-decoder, a pooled overview that
equals pooling the full pattern, exact windows, payloads under 2 MB, and the page itself in AppTest."""

from __future__ import annotations

import html

import numpy as np
import pytest
from attnlab.analysis.attention.long_records import rollout_query
from attnlab.analysis.attention.pooling import pool_matrix
from attnlab.analysis.attention.rollout import attention_rollout
from attnlab.app import longinput as L
from attnlab.app.figures.overview import overview_heatmap, payload_bytes, row_bands, window_heatmap
from attnlab.app.navigation import PAGES
from attnlab.model.inputs import InputError
from attnlab.model.registry import CPU_CONTEXT, RANDOM, load

from tests.app.conftest import ok, open_page, overview_z, specs, z_of

T = 4096
MB2 = 2_000_000


@pytest.fixture(scope="module")
def lm():
    return load("random-long-decoder")


@pytest.fixture(scope="module")
def cap(lm):
    return L.run_capture(lm, L.long_sample(T - 1, period=500))  # the byte tokenizer adds one start token


@pytest.fixture(scope="module")
def full(cap):
    """Head 2 of the last layer, whole: float32 [T, T] from the record's own (numpy) recomputation."""
    return L.text_records(cap)[-1].pattern(2)


def test_model_and_page_are_registered():
    cfg = RANDOM["random-long-decoder"]
    assert (cfg.arch, cfg.max_len, cfg.positional) == ("decoder", 32768, "rope")  # on a CUDA GPU
    assert CPU_CONTEXT["random-long-decoder"] == 4096
    assert ("long_input.py", "Long inputs", "long-inputs", ":material/straighten:") in PAGES
    paths = [p[2] for p in PAGES]
    assert len(set(paths)) == len(paths) and paths[:6] == ["", "heatmaps", "masks", "scores", "rollout", "heads"]


def test_capture_keeps_q_and_k_only(cap):
    assert len(cap.text_tokens) == T and cap.text_group == "self" and cap.context == 4096
    assert (len(L.text_records(cap)), cap.n_heads) == (2, 4)
    for i, rec in enumerate(L.text_records(cap)):
        assert rec.layer == i and rec.lazy and rec.backend == "sdpa" and rec.bias is None
        assert rec.q.shape == rec.k.shape == (1, 4, T, 16)  # O(T·d) per head, no [H, T, T]
    assert cap.text_tokens[1:501] == cap.text_tokens[501:1001]  # the sample repeats every 500 characters


def test_overview_equals_pooling_the_full_pattern(cap, full):
    ov = L.head_overview(cap, 1, 2, 512, "max")
    want, qe, ke = pool_matrix(np.where(L.text_records(cap)[-1].mask_for(), full, np.nan), 512, "max")
    assert ov.pooled.shape == (512, 512) and ov.block == (8, 8)
    assert np.array_equal(ov.q_edges, qe) and np.array_equal(ov.k_edges, ke)
    assert np.array_equal(np.isnan(ov.pooled), np.isnan(want))  # the masked triangle, block for block
    np.testing.assert_allclose(ov.pooled, want, atol=1e-6, equal_nan=True)
    assert np.isnan(ov.pooled[0, 1]) and ov.pooled[0, 0] == pytest.approx(1.0)  # token 0 sees only itself
    mean = L.head_overview(cap, 1, 2, 512, "mean").pooled
    np.testing.assert_allclose(mean, pool_matrix(np.where(L.text_records(cap)[-1].mask_for(), full, np.nan), 512,
                                                 "mean")[0], atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("q0, k0, size, box", [
    (3840, 0, 256, (3840, 4096, 0, 256)),  # far below the diagonal: every weight visible
    (2000, 1950, 128, (2000, 2128, 1950, 2078)),  # across the diagonal
    (5000, 4090, 64, (4032, 4096, 4032, 4096)),  # past the end: moved inside the text
    (0, 0, 16, (0, 16, 0, 16)),
])
def test_window_is_the_pattern_sliced(cap, full, q0, k0, size, box):
    w = L.head_window(cap, 1, 2, q0, k0, size)
    assert (w.q0, w.q1, w.k0, w.k1) == box and w.values.shape == (box[1] - box[0], box[3] - box[2])
    a, b, c, d = box
    np.testing.assert_allclose(w.values, full[a:b, c:d], atol=1e-6, rtol=0)
    assert np.array_equal(w.mask, np.tri(T, dtype=bool)[a:b, c:d]) and (w.values[~w.mask] == 0).all()


def test_window_and_overview_reject_bad_heads(cap):
    with pytest.raises(IndexError, match="head 4"):
        L.head_window(cap, 0, 4, 0, 0, 16)
    with pytest.raises(IndexError, match="layer 2"):
        L.head_overview(cap, 2, 0)
    with pytest.raises(ValueError, match="window size"):
        L.clamp_window(T, 0, 0, 512)


def test_figures_at_4096_tokens_stay_under_2_mb(cap):
    ov = L.head_overview(cap, 1, 0)
    w = L.head_window(cap, 1, 0, 3840, 0, L.MAX_WINDOW)  # the largest window, every cell visible
    fo = overview_heatmap(ov.pooled, ov.q_edges, ov.k_edges, how="max", title="o", window=(w.q0, w.q1, w.k0, w.k1))
    fw = window_heatmap(w.values, w.mask, cap.text_tokens, w.q0, w.k0, title="w")
    po, pw = payload_bytes(fo), payload_bytes(fw)
    assert po == len(fo.to_json()) and pw + po <= MB2, (po, pw)
    assert po < 1_300_000  # the masked triangle is not sent (a dense 512×512 float32 matrix is ~1.8 MB)
    # the overview shows exactly the pooled matrix, its bands put back together
    np.testing.assert_array_equal(overview_z(fo), ov.pooled)
    assert len(fo.data) == len(row_bands(ov.pooled)) > 1 and all(t.z.dtype == np.float32 for t in fo.data)
    assert fo.layout.yaxis.categoryarray[64] == "512–519" and fo.layout.xaxis.categoryarray[0] == "0–7"
    assert "max of rows %{y} × cols %{x}" in fo.data[0].hovertemplate
    finite = ov.pooled[np.isfinite(ov.pooled)]  # colours top out at the 99th percentile, below row 0's 1.0
    assert fo.layout.coloraxis.cmax == pytest.approx(np.percentile(finite, 99)) and fo.layout.coloraxis.cmax < 0.5
    assert fo.layout.xaxis.ticktext[:3] == ("0", "256", "512") and fo.layout.xaxis.type == "category"
    (shape,) = fo.layout.shapes  # the window, in block units: rows 3840..4096 → blocks 480..512
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (-0.5, 31.5, 479.5, 511.5)
    # the window: exact float32 values on integer axes numbered by absolute position
    tr = fw.data[0]
    assert tr.type == "heatmap" and np.asarray(tr.z).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(tr.z), w.values)
    assert list(tr.y) == list(range(3840, 4096)) and list(tr.x) == list(range(0, 256))
    assert "%{z:.7g}" in tr.hovertemplate


def test_window_ticks_are_escaped_and_repeats_stay_apart(lm):
    text = "<b> & a " * 250  # 2,000 characters: the same few tokens over and over
    cap = L.run_capture(lm, text)
    assert len(cap.text_tokens) == 2001
    w = L.head_window(cap, 0, 1, 1000, 990, 32)
    fig = window_heatmap(w.values, w.mask, cap.text_tokens, w.q0, w.k0, title="w")
    xa = fig.layout.xaxis
    vals = [int(v) for v in xa.tickvals]
    assert vals == sorted(set(vals)) and vals[0] == 990 and len(vals) == 32  # one tick per position, no merging
    assert list(xa.ticktext) == [html.escape(cap.text_tokens[v], quote=False) for v in vals]
    assert "&lt;" in xa.ticktext and "&amp;" in xa.ticktext and not any("<" in t for t in xa.ticktext)
    np.testing.assert_allclose(w.values, L.text_records(cap)[0].pattern(1)[1000:1032, 990:1022], atol=1e-6)


def test_query_rollout_equals_full_rollout(lm):
    cap = L.run_capture(lm, L.long_sample(300, period=37))
    stack = np.stack([r.pattern() for r in L.text_records(cap)]).astype(np.float64)
    full = attention_rollout(stack)
    for q in (0, 150, len(cap.text_tokens) - 1):
        np.testing.assert_allclose(rollout_query(L.text_records(cap), q), full[q], atol=1e-6)


def test_long_sample_repeats_and_fits(lm):
    s = L.long_sample(4000)
    assert len(s) == 4000 and set(s) <= set("abcdefghijklmnopqrstuvwxyz ") and "  " not in s
    assert s[:3500] == s[500:4000] and s[:500] != s[1:501]  # period n / 8
    assert len(L.long_sample(1000, period=37)) == 1000 and L.long_sample(1000, period=37)[:900] == \
        L.long_sample(1000, period=37)[37:937]
    assert len(lm.encode(s).ids[0]) == 4001 <= lm.cfg.max_len
    assert L.sample_chars(4096) == 4000 and L.sample_chars(256) == 248
    assert L.long_sample(100, seed=1) != L.long_sample(100, seed=2)


def test_encoder_decoder_reads_the_text_as_its_source():
    lm = load("random-encdec")
    cap = L.run_capture(lm, "the cat sat on the mat " * 8)
    assert cap.text_group == "encoder" and all(r.stack == "encoder" and r.attn_type == "self" for r in L.text_records(cap))
    assert len(cap.text_tokens) == L.text_records(cap)[0].q_len == len("the cat sat on the mat " * 8) + 1  # + end token


# -- the page --------------------------------------------------------------------------------------------------
def _page_with_text(text: str, **params):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../../pages/long_input.py", default_timeout=120)
    at.session_state["long_text"] = text
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()


def test_page_draws_overview_and_window_at_3000_tokens():
    text = L.long_sample(2999, period=400)
    at = _page_with_text(text, long_model="random-long-decoder", long_layer=0, long_head=3, long_q0=2600,
                         long_k0=100, long_size=64)
    ok(at)
    over, win = specs(at)
    assert over["layout"]["title"]["text"] == "layer 0, head 3: all 3,000 tokens (max over 6×6 blocks)"
    assert over["layout"]["meta"]["shape"] == [500, 500]
    assert win["layout"]["title"]["text"] == "rows 2600–2663, keys 100–163 (exact)"
    # what the page sent equals the app layer's numbers
    lm = load("random-long-decoder")
    cap = L.run_capture(lm, text)
    want = L.head_window(cap, 0, 3, 2600, 100, 64).values
    np.testing.assert_allclose(z_of(win["data"][0]), want, atol=1e-7)
    bands = [z_of(t) for t in over["data"]]
    assert sum(b.size for b in bands) < 500 * 500 * 0.6  # the masked triangle is not sent
    np.testing.assert_allclose(np.nanmax(np.concatenate([b.ravel() for b in bands])),
                               np.nanmax(L.head_overview(cap, 0, 3).pooled), atol=1e-7)
    sent = sum(len(el.proto.spec) for el in at.get("plotly_chart"))
    assert sent <= MB2
    assert "3,000 tokens" in at.main.caption[-1].value and "sent" in at.main.caption[-1].value


@pytest.mark.parametrize("bad", ["²", "9" * 5000, "-3", "1e3", ""])
def test_a_bookmarked_window_position_that_is_no_number_falls_back(bad):
    """A forged or mangled bookmark (`long_q0=²`: a digit to str.isdigit, not to int; 5,000 digits: more than int()
    converts) puts the window at its default place, as every other widget does with a bad URL value."""
    at = _page_with_text("abc " * 100, long_model="random-long-decoder", long_size=64, long_q0=bad, long_k0=bad)
    ok(at)
    assert specs(at)[1]["layout"]["title"]["text"] == "rows 337–400, keys 337–400 (exact)"  # the last 64 of 401


def test_page_fills_the_long_sample():
    at = open_page("long_input", long_model="random-long-decoder")
    assert "The text is empty" in at.info[0].value and not specs(at)
    at.button(key="long_fill").click().run()
    ok(at)
    assert at.text_area(key="long_text").value == L.long_sample(4000)
    over, win = specs(at)
    assert over["layout"]["title"]["text"] == "layer 1, head 0: all 4,001 tokens (max over 8×8 blocks)"
    assert win["layout"]["title"]["text"] == "rows 3873–4000, keys 3873–4000 (exact)"  # the last 128 tokens


def test_page_says_when_the_text_is_over_the_context():
    at = _page_with_text("x" * 5000, long_model="random-long-decoder")
    assert not at.exception and not specs(at)
    msg = at.error[0].value
    assert "5,001 tokens long; the CPU limit of random-long-decoder is 4,096 tokens" in msg
    assert "a run on a CUDA GPU reads up to 32,768" in msg and "--" not in msg  # no CLI flag in the app
    at = _page_with_text("abc " * 100, long_model="random-decoder")  # 401 tokens, context 256
    assert "context is 256 tokens" in at.error[0].value and not at.exception
    at = _page_with_text("   \n ", long_model="random-long-decoder")
    assert "The text is empty" in at.info[0].value and not at.error and not specs(at)


def test_the_cpu_limit_is_one_property(lm, monkeypatch):
    from attnlab.model.loaded import LoadedModel

    assert lm.context == 4096 and lm.info()["context"] == 4096 and lm.describe()["full_context"] == 32768
    assert load("random-decoder").context == 256 and load("random-decoder").describe()["full_context"] == 256
    with pytest.raises(InputError, match="the CPU limit of random-long-decoder is 4,096 tokens"):
        lm.encode("x" * 4096)  # 4,097 tokens with [BOS]
    monkeypatch.setattr(LoadedModel, "device", property(lambda self: "cuda"))  # as on a GPU: the config's context
    assert lm.context == 32768 and len(lm.encode("x" * 5000).ids[0]) == 5001
