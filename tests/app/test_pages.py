"""Every page with AppTest: default state and main options; figures checked by their data."""

from __future__ import annotations

import html

import numpy as np
import pytest
from attnlab.model.registry import bundled_names, load

from tests.app.conftest import ok, open_page, panel, specs, titled, widget, z_of

DEFAULT = "lecture-decoder" if "lecture-decoder" in bundled_names() else "random-decoder"
MARKUP = "<b>x</b> & y"  # byte tokens '<', 'b', '>', '&' must stay text


def _shape(model: str) -> tuple[int, int]:
    from attnlab.model.registry import load

    cfg = load(model).cfg
    return cfg.n_layers, cfg.n_heads


# -- Explore ----------------------------------------------------------------------------------------------
def test_explore_default_shows_tokens_rows_and_prediction():
    at = open_page()
    ok(at)
    assert at.query_params["model"] == DEFAULT
    assert "preset" in at.query_params  # the default view is a preset, bookmarkable
    n_layers, _ = _shape(DEFAULT)
    fig = titled(at, "Where does token")
    (trace,) = fig["data"]
    z = z_of(trace)
    assert z.shape[0] == n_layers and trace["y"] == [f"layer {i}" for i in range(n_layers)]
    strip = [h.proto.body for h in at.get("html") if 'class="strip"' in h.proto.body]
    assert strip and "[BOS]" in strip[0]
    assert at.dataframe[0].value.shape == (5, 2)  # top-5 prediction


def test_explore_escapes_markup_in_strip_and_ticks():
    at = open_page(model="random-decoder", text=MARKUP)
    ok(at)
    assert at.query_params["text"] == MARKUP and "preset" not in at.query_params
    body = next(h.proto.body for h in at.get("html") if 'class="strip"' in h.proto.body)
    assert "<b>x" not in body and "&lt;" in body and "&amp;" in body
    ticks = titled(at, "Where does token")["layout"]["xaxis"]["ticktext"]
    assert "&lt;" in ticks and "&gt;" in ticks and "&amp;" in ticks and "<" not in ticks


def test_bad_input_is_a_message_not_a_traceback():
    at = open_page(model="random-decoder", text="bad \x07 bell")
    assert not at.exception
    assert any("control character" in e.value for e in at.error)
    at = open_page(model="/no/such/model-folder")
    assert not at.exception
    assert at.error and "Traceback" not in at.error[0].value


# -- Heatmaps ---------------------------------------------------------------------------------------------
def test_heatmaps_mosaic_is_one_trace_with_nan_gutters():
    at = open_page("heatmaps", model="random-decoder", text="abcdefgh")
    ok(at)
    n_layers, n_heads = _shape("random-decoder")
    t = 9  # [BOS] + 8 bytes
    mosaic = titled(at, "self-attention")
    assert len(mosaic["data"]) == 1 and mosaic["data"][0]["type"] == "heatmap"
    z = z_of(mosaic["data"][0])
    gap = mosaic["layout"]["meta"]["gap"]
    assert z.shape == (n_layers * (t + gap) - gap, n_heads * (t + gap) - gap)
    assert np.isnan(z[t:t + gap]).all() and np.isnan(z[:, t:t + gap]).all()  # gutters
    block = z[:t, :t]
    assert np.isnan(block[np.triu_indices(t, 1)]).all()  # causal: NaN above the diagonal
    assert np.allclose(np.nansum(block, 1), 1, atol=1e-5)


def test_heatmaps_single_head_ticks_hover_and_mask():
    at = open_page("heatmaps", model="random-decoder", text=MARKUP)
    ok(at)
    fig = titled(at, "layer 1, head 0")
    trace = fig["data"][0]
    z = z_of(trace)
    t = len(MARKUP) + 1
    assert z.shape == (t, t)
    assert np.isnan(z[np.triu_indices(t, 1)]).all() and not np.isnan(np.diag(z)).any()
    x = fig["layout"]["xaxis"]  # thinned to the column's square plot: each kept label names its own token
    tokens = ["[BOS]"] + list(MARKUP)  # byte tokens
    assert x["ticktext"] == [html.escape(tokens[v], quote=False) for v in x["tickvals"]]
    assert "&gt;" in x["ticktext"] and "&amp;" in x["ticktext"]
    keys = [c.split(" → ")[1] for c in trace["text"][t - 1]]  # the last query's hover: every key token
    assert [k for k, c in enumerate(keys) if c == "b"] == [2, 7]  # repeated tokens keep their own column
    assert "query" in trace["hovertemplate"] and "%{z" in trace["hovertemplate"]
    assert trace["text"][1][2] == "&lt; → b"  # hover: query token → key token


@pytest.mark.parametrize("kind, fuse", [("scores", "none"), ("masked", "mean"), ("pattern", "max")])
def test_heatmaps_matrix_kinds_and_fusion(kind, fuse):
    at = open_page("heatmaps", model="random-decoder", text="hello world")
    at.selectbox(key="kind").set_value(kind).run()
    at.selectbox(key="fuse").set_value(fuse).run()
    ok(at)
    mosaic = specs(at)[0]
    z = z_of(mosaic["data"][0])
    n_layers, n_heads = _shape("random-decoder")
    assert mosaic["layout"]["meta"]["heads"] == (1 if fuse != "none" else n_heads)
    t = 12
    block = z[:t, :t]
    if kind == "scores":  # raw scores are unmasked and centred on 0
        assert not np.isnan(block).any() and mosaic["data"][0]["zmid" if "zmid" in mosaic["data"][0] else "zmin"] < 0
        assert mosaic["data"][0]["colorscale"]  # diverging, centred on 0
    else:
        assert np.isnan(block[np.triu_indices(t, 1)]).all()
        if kind == "pattern":
            assert "colorscale" not in mosaic["data"][0]  # the Streamlit theme's scale: light and dark
    assert at.query_params["kind"] == kind and at.query_params["fuse"] == fuse


def test_heatmaps_url_state_preselects_layer_head_query():
    at = open_page("heatmaps", model="random-decoder", text="hello world", layer=0, head=2, query=3, hv="all")
    ok(at)
    assert widget(at, "layer").value == 0 and widget(at, "head").value == 2
    assert at.query_params["layer"] == "0" and at.query_params["head"] == "2"
    hv = titled(at, "Head view")
    assert hv["layout"]["meta"]["query"] == 3 and len(hv["layout"]["meta"]["heads"]) == _shape("random-decoder")[1]
    widget(at, "head").set_value(1).run()
    ok(at)
    assert at.query_params["head"] == "1"
    assert titled(at, "layer 0, head 1")


# -- Masks ------------------------------------------------------------------------------------------------
def test_masks_default_causal_vs_bidirectional():
    at = open_page("masks", model="random-decoder", text="masks!")
    ok(at)
    t = 7
    a = z_of(panel(at, "A: attention weights"))
    b = z_of(panel(at, "B: attention weights"))
    assert np.isnan(a[np.triu_indices(t, 1)]).all() and not np.isnan(b).any()
    sa = z_of(panel(at, "A: scores with −∞ where masked"))
    assert np.isnan(sa[np.triu_indices(t, 1)]).all()  # −∞ shows as masked
    d = z_of(titled(at, "B − A")["data"][0])
    assert np.nanmax(np.abs(d)) > 0


@pytest.mark.parametrize("kind, key, value", [("sliding_window", "window", 2), ("prefix_lm", "prefix", 3),
                                              ("padding", "pad", 2)])
def test_masks_other_kinds(kind, key, value):
    at = open_page("masks", model="random-decoder", text="masks!", mask_b=kind)
    at.slider(key=key).set_value(value).run()
    ok(at)
    m = ~np.isnan(z_of(panel(at, "B: mask (grey = hidden)")))  # visible cells
    t = 7
    i, j = np.indices((t, t))
    want = {"sliding_window": (j <= i) & (i - j < value), "prefix_lm": (j <= i) | (j < value),
            "padding": (j <= i) & (j < t - value)}[kind]
    assert (m == want).all()
    assert at.query_params["mask_b"] == kind


# -- Score scales -----------------------------------------------------------------------------------------
def test_scores_sqrt_dk_switch_and_temperature():
    at = open_page("scores", model="random-decoder", text="the scale of scores")
    ok(at)
    n_heads = _shape("random-decoder")[1]
    rows, soft = at.dataframe[0].value, at.dataframe[1].value  # two narrow tables (whole at 1024 px)
    assert list(rows["head"]) == [h for h in range(n_heads) for _ in range(2)]
    assert list(rows["score"]) == ["q·kᵀ", "scaled score"] * n_heads
    assert list(soft["head"]) == list(range(n_heads)) and (soft["effective keys (mean)"] >= 1 - 1e-6).all()
    before = z_of(titled(at, "softmax(QKᵀ/√d_k")["data"][0])
    at.toggle(key="sqrt_dk").set_value(False).run()
    ok(at)
    after = z_of(titled(at, "softmax(QKᵀ / τ")["data"][0])
    t = before.shape[0]
    assert np.isnan(after[np.triu_indices(t, 1)]).all()
    assert np.nanmax(after, 1).mean() >= np.nanmax(before, 1).mean()  # sharper without the factor
    at.slider(key="tau").set_value(0.2).run()
    ok(at)
    assert at.query_params["tau"] == "0.2" and at.query_params["sqrt_dk"] == "0"
    sweep = titled(at, "entropy (nats) vs temperature")
    assert [d["name"] for d in sweep["data"]] == ["with 1/√d_k", "without"]


# -- Rollout ----------------------------------------------------------------------------------------------
def test_rollout_default_nine_methods():
    at = open_page("rollout", timeout=600)  # the held-out table runs integrated gradients on 40 examples
    ok(at)
    fig = titled(at, "Which tokens matter")
    assert fig["data"][0]["y"] == ["last-layer attention", "rollout", "flow", "attention norm", "value zeroing",
                                   "gradient relevance", "input × gradient", "integrated gradients",
                                   "attention × gradient"]
    z = z_of(fig["data"][0])
    assert z.shape[0] == 9 and np.nanmax(z) <= 1 + 1e-9
    assert len(at.dataframe[0].value) == 9


def test_rollout_context_mixing_rows_are_the_analysis():
    from attnlab.analysis.probes.context_mixing import attention_norms, value_zeroing

    text = "the cat sat on the mat and the cat ran"
    at = open_page("rollout", model="random-decoder", text=text, query=4)
    ok(at)
    lm, q = load("random-decoder"), 4
    inputs = lm.encode(text)
    raw = z_of({"z": titled(at, "Which tokens matter")["data"][0]["customdata"]})  # [methods, T], unscaled
    names = titled(at, "Which tokens matter")["data"][0]["y"]
    for label, fn in (("attention norm", attention_norms), ("value zeroing", value_zeroing)):
        np.testing.assert_allclose(raw[names.index(label)], fn(lm, inputs)[-1, q], atol=1e-9)
    layer = lm.cfg.n_layers - 1
    at.button_group(key="rollout_matrix").set_value(f"value zeroing (layer {layer})").run()
    ok(at)
    m = z_of(titled(at, f"value zeroing (layer {layer}): row = output")["data"][0])
    assert np.triu(m, 1).max() == 0 and np.allclose(m.sum(-1), 1)  # causal: later tokens move nothing


def test_rollout_options_change_the_rows():
    at = open_page("rollout", model="random-decoder", text="roll out the attention")
    ok(at)
    rows0 = z_of(titled(at, "Which tokens matter")["data"][0])
    at.slider(key="residual").set_value(0.0).run()
    at.selectbox(key="fusion").set_value("max").run()
    ok(at)
    rows1 = z_of(titled(at, "Which tokens matter")["data"][0])
    assert not np.allclose(rows0[1], rows1[1])  # rollout row changed
    at.button_group(key="rollout_matrix").set_value("relevance").run()
    ok(at)
    m = z_of(titled(at, "relevance: row = output")["data"][0])
    t = m.shape[0]
    assert np.allclose(m[np.triu_indices(t, 1)], 0)  # causal model: no relevance from later tokens


def test_rollout_encoder_decoder_has_source_rows():
    """Context mixing on an encoder–decoder: the target rows are the analysis' last decoder self-attention rows, the
    source rows its cross-attention rows; the source-side matrix is the cross-attention's [T, S]."""
    from attnlab.analysis.probes.context_mixing import attention_norms, value_zeroing

    at = open_page("rollout", model="random-encdec", text="le chat noir", src="the black cat", query=1)
    ok(at)
    src = titled(at, "on the source side")["data"][0]
    assert src["y"] == ["last-layer attention", "rollout", "attention norm", "value zeroing", "gradient relevance",
                        "input × gradient", "integrated gradients", "attention × gradient"]
    assert not [c.value for c in at.caption if "context mixing is measured here on one self-attention stack" in c.value]
    lm = load("random-encdec")
    inputs = lm.encode("le chat noir", "the black cat")
    tgt = titled(at, "Which tokens matter")["data"][0]
    raw_t, raw_s = z_of({"z": tgt["customdata"]}), z_of({"z": src["customdata"]})  # [methods, T], [methods, S]
    for label, fn in (("attention norm", attention_norms), ("value zeroing", value_zeroing)):
        mix = fn(lm, inputs)
        np.testing.assert_allclose(raw_t[tgt["y"].index(label)], mix.decoder[-1, 1], atol=1e-9)
        np.testing.assert_allclose(raw_s[src["y"].index(label)], mix.cross[-1, 1], atol=1e-9)
    layer = lm.cfg.dec_layers - 1
    at.button_group(key="rollout_matrix").set_value(f"value zeroing (source side, layer {layer})").run()
    ok(at)
    m = z_of(titled(at, f"value zeroing (source side, layer {layer}): row = output")["data"][0])
    np.testing.assert_allclose(m, value_zeroing(lm, inputs).cross[-1], atol=1e-6)  # float32 on the figure
    assert m.shape == (len(inputs.tokens), len(inputs.src_tokens))


# -- Heads ------------------------------------------------------------------------------------------------
def test_heads_table_and_ablation():
    at = open_page("heads", model="random-decoder", text="heads heads heads")
    ok(at)
    n_layers, n_heads = _shape("random-decoder")
    table = at.dataframe[0].value
    assert len(table) == n_layers * n_heads and {"label", "induction", "entropy"} <= set(table.columns)
    grid = titled(at, "Change in p(")
    assert z_of(grid["data"][0]).shape == (n_layers, n_heads)
    assert at.metric and at.metric[0].label.startswith("p(")
    at.multiselect(key="labels").set_value([table["label"].iloc[0]]).run()
    at.selectbox(key="sort").set_value("entropy").run()
    at.selectbox(key="site").set_value("blocks.0.attn").run()
    ok(at)
    assert set(at.dataframe[0].value["label"]) == {table["label"].iloc[0]}
    assert "blocks.0.attn, head 0 zeroed" in [m.value.strip("*") for m in at.markdown]


@pytest.mark.parametrize("model", ["random-encoder", "random-encdec"])
def test_every_page_runs_for_other_architectures(model):
    at = open_page(None, model=model)
    ok(at)
    for page in ("heatmaps", "masks", "scores", "rollout", "heads"):
        at.switch_page(f"../pages/{page}.py").run()
        ok(at)
        assert specs(at), page


def test_presentation_mode_hides_options_and_keeps_state_across_pages():
    at = open_page(None, model="random-decoder", text="present me", present=1)
    ok(at)
    assert at.toggle(key="present").value is True
    assert not [s for s in at.selectbox if s.key == "backend"]  # fewer controls
    at.switch_page("../pages/heatmaps.py").run()
    widget(at, "layer").set_value(0).run()
    at.switch_page("../pages/scores.py").run()
    ok(at)
    assert at.text_area(key="text").value == "present me" and widget(at, "layer").value == 0
    assert at.query_params["present"] == "1"


def test_bookmarked_preset_opens_its_text():
    from attnlab.app.presets import presets

    p = presets(DEFAULT)[-1]
    at = open_page("rollout", model=DEFAULT, preset=p.id)
    ok(at)
    assert at.text_area(key="text").value == p.text and at.selectbox(key="preset").value == p.id
    assert at.query_params["preset"] == p.id and "text" not in at.query_params


def test_heatmaps_sets_grouped_query_heads_side_by_side(tmp_path, monkeypatch):
    """A Llama folder with 4 query heads on 2 k/v heads: the mosaic labels each head's k/v head."""
    from attnlab.app.inputs import FOLDER

    from tests.hf_fixtures import build

    folder = build("llama", "llama-gqa2-tied-theta", tmp_path)
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(tmp_path))
    at = open_page("heatmaps")
    at.selectbox(key="model").set_value(FOLDER).run()
    at.text_input(key="folder").set_value(str(folder)).run()
    at.text_area(key="text").set_value("the cat sat on the mat").run()  # within the tiny model's 64 tokens
    ok(at)
    fig = titled(at, "self-attention — attention weights")
    assert fig["layout"]["meta"]["kv_group"] == 2 and fig["layout"]["meta"]["heads"] == 4
    assert fig["layout"]["xaxis"]["ticktext"] == ["head 0 · kv 0", "head 1 · kv 0", "head 2 · kv 1", "head 3 · kv 1"]
    assert "each run of 2 heads shares one key/value head" in " ".join(c.value for c in at.caption)
