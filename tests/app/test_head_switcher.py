"""The head matrix the browser switches itself (app.figures.switcher.head_switcher): every trace and every button
shows exactly the data of the server-side figure of that head, and the page sends it within its budget."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.switcher import SWITCH_BYTES, SWITCH_PNG_BYTES, head_switcher, switch_layers
from attnlab.model.registry import load

from .conftest import ok, open_page, specs, titled, z_of

TEXT = "the cat sat on the mat because the cat was tired"


@pytest.fixture(scope="module")
def run():
    lm = load("random-decoder")
    return lm.capture(lm.encode(TEXT))


def nan_equal(a, b) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def test_which_layers_fit_the_budget():
    assert switch_layers(4, 4, 64, 64, 2) == [0, 1, 2, 3]  # 16 heads × 64² × 4 B = 262 kB
    assert switch_layers(12, 12, 100, 100, 5) == [5]  # 144 heads do not fit, one layer's 12 do (480 kB)
    assert switch_layers(12, 12, 128, 128, 5) is None  # 12 × 128² × 4 B = 786 kB > SWITCH_BYTES
    assert switch_layers(1, 1, 600, 600, 0) is None  # pooled: the server draws it
    assert switch_layers(2, 4, 512, 512, 1) == [0, 1]  # PNGs: head_switcher keeps the layers that fit
    assert SWITCH_BYTES == 600_000


@pytest.mark.parametrize("kind", ["pattern", "scores"])
def test_every_trace_and_button_is_that_heads_server_figure(run, kind):
    group = "self"
    stack = run.matrices(group, "masked" if kind == "scores" else "pattern")  # [L, H, q, k]
    mask = run.mask_of(group)
    qt, kt = run.group_tokens(group)
    L, H = stack.shape[:2]
    layers = switch_layers(L, H, *stack.shape[2:], 1)
    assert layers == list(range(L))
    fig = head_switcher(stack, qt, kt, 1, 0, layers, mask=mask, kind=kind)
    heads = [tuple(p) for p in fig.layout.meta["heads"]]
    assert heads[0] == (1, 0) and sorted(heads) == [(lyr, h) for lyr in range(L) for h in range(H)]
    assert [t.visible for t in fig.data] == [True] + [False] * (L * H - 1)
    for trace, (lyr, h) in zip(fig.data, heads):
        server = matrix_heatmap(stack[lyr, h], qt, kt, mask=mask, kind=kind).data[0]
        assert nan_equal(np.asarray(trace.z, dtype=np.float64), np.asarray(server.z, dtype=np.float64))
        z = np.where(mask, stack[lyr, h], np.nan)  # the capture's own numbers, masked
        assert np.allclose(np.asarray(trace.z, dtype=np.float64), z, equal_nan=True, atol=1e-6)
        assert (trace.zmin, trace.zmax) == (server.zmin, server.zmax)
    # each button shows exactly its head, retitles the chart, and shows the button rows of that head and layer
    for menu in fig.layout.updatemenus:
        for b in menu.buttons:
            lyr, h = (int(b.label.split()[1]), None) if menu.name == "layer" else (None, int(b.label.split()[1]))
            vis, lay = b.args
            shown = [heads[i] for i, v in enumerate(vis["visible"]) if v]
            assert len(shown) == 1
            assert lay["title.text"] == f"<b>layer {shown[0][0]}, head {shown[0][1]}</b>"
            assert (lyr is None or shown[0][0] == lyr) and (h is None or shown[0][1] == h)
            rows = [i for i, m in enumerate(fig.layout.updatemenus) if lay[f"updatemenus[{i}].visible"]]
            assert {fig.layout.updatemenus[i].name for i in rows} == {"head", "layer"}


def test_heatmaps_page_sends_the_switcher_and_keeps_url_state():
    at = open_page("heatmaps", model="random-decoder", text=TEXT, layer=0, head=1)
    ok(at)
    fig = titled(at, "layer 0, head 1")
    assert len(fig["data"]) == len(fig["layout"]["meta"]["heads"]) > 1
    assert fig["layout"]["meta"]["heads"][0] == [0, 1] and fig["data"][0]["visible"] is True
    assert at.query_params["layer"] == "0" and at.query_params["head"] == "1"
    assert any("switch it in the browser" in c.value for c in at.caption)
    total = sum(len(str(s)) for s in specs(at))
    assert total < 2_000_000
    # a server-side change of head still works and lands in the URL
    at.query_params["head"] = "0"
    at.run()
    ok(at)
    fig = titled(at, "layer 0, head 0")
    assert fig["layout"]["meta"]["heads"][0] == [0, 0] and at.query_params["head"] == "0"
    lm = load("random-decoder")
    want = lm.capture(lm.encode(TEXT)).matrices("self")[0, 0]  # [q, k]
    got = z_of(fig["data"][0])
    assert np.allclose(got[~np.isnan(got)], want[~np.isnan(got)], atol=1e-6)


def test_png_heads_at_512_tokens_are_each_heads_own_image():
    lm = load("random-long-decoder")
    run = lm.capture(lm.encode("ab" * 255 + "a"))  # 512 tokens with [BOS]: sent as PNGs, not floats
    stack, mask = run.matrices("self"), run.mask_of("self")  # [L, H, 512, 512]
    qt, kt = run.group_tokens("self")
    layers = switch_layers(*stack.shape, 1)
    assert layers == [0, 1]
    fig = head_switcher(stack, qt, kt, 1, 2, layers, mask=mask)
    heads = [tuple(p) for p in fig.layout.meta["heads"]]
    assert heads[0] == (1, 2) and len(heads) == stack.shape[0] * stack.shape[1]
    assert sum(len(t.source) for t in fig.data) <= SWITCH_PNG_BYTES
    for trace, (lyr, h) in zip(fig.data, heads):
        assert trace.type == "image"
        assert trace.source == matrix_heatmap(stack[lyr, h], qt, kt, mask=mask).data[0].source
    tiny = head_switcher(stack, qt, kt, 1, 2, layers, mask=mask, budget=1)  # nothing fits: the plain figure
    assert len(tiny.data) == 1 and not tiny.layout.updatemenus


@pytest.mark.parametrize("t", [6, 40])
def test_the_layer_row_sits_a_button_row_above_the_head_row(t):
    stack = np.random.default_rng(0).random((2, 3, t, t)).astype(np.float32)  # [L, H, q, k]
    toks = [f"t{i}" for i in range(t)]
    fig = head_switcher(stack, toks, toks, 1, 0, [0, 1])
    heads = [m for m in fig.layout.updatemenus if m.name == "head"]
    layers = [m for m in fig.layout.updatemenus if m.name == "layer"]
    assert len(heads) == 2 and len(layers) == 3 and {m.y for m in heads} == {1.0}
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert fig.layout.margin.t == 130 and all(abs((m.y - 1) * plot_px - 34) < 1e-6 for m in layers)


def test_scores_page_switches_the_counterfactual_of_every_head_at_its_scale_and_temperature():
    from attnlab.analysis.attention.scores import counterfactual_softmax

    at = open_page("scores", model="random-decoder", text=TEXT, layer=1, head=2, tau=0.5, sqrt_dk=0)
    ok(at)
    fig = titled(at, "layer 1, head 2: softmax(QKᵀ / τ=0.5)")
    assert any("switch it in the browser" in c.value for c in at.caption)
    lm = load("random-decoder")
    run = lm.capture(lm.encode(TEXT))
    heads = [tuple(p) for p in fig["layout"]["meta"]["heads"]]
    assert heads[0] == (1, 2) and len(heads) == len(run.sites("self")) * run.n_heads
    for trace, (lyr, h) in zip(fig["data"], heads):
        rec = run.records[run.sites("self")[lyr]]
        want = counterfactual_softmax(rec.raw_qk(h), rec.scale, tau=0.5, mask=rec.mask_for()).unscaled  # no √d_k
        assert np.allclose(z_of(trace), np.where(rec.mask_for(), want, np.nan), atol=1e-6, equal_nan=True)
        assert (trace["zmin"], trace["zmax"]) == (0, 1)
    titles = {b["args"][1]["title.text"] for m in fig["layout"]["updatemenus"] for b in m["buttons"]}
    assert "<b>layer 0, head 3: softmax(QKᵀ / τ=0.5)</b>" in titles
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "2"


def test_pngs_are_encoded_once_per_matrix_and_colour_range():
    from attnlab.app.figures import matrix
    from attnlab.app.figures.matrix import PNG_CACHE, colour_png, png_of

    z = np.random.default_rng(3).random((300, 300)).astype(np.float32)  # [q, k]
    z[0, 1] = np.nan
    uri = png_of(z, "Blues", 0.0, 1.0)
    assert png_of(z.copy(), "Blues", 0.0, 1.0) is uri  # the same numbers: the stored image
    assert png_of(z, "Blues", 0.0, 0.5) != uri and png_of(z, "Viridis", 0.0, 1.0) != uri
    z2 = z.copy()
    z2[5, 5] += 0.25
    assert png_of(z2, "Blues", 0.0, 1.0) != uri  # one cell differs: a new image
    w = np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)  # [q, k]
    as_int = w.view(np.int32)  # the same bytes read as other numbers: another image
    assert png_of(as_int, "Blues", 0.0, 1.0) != png_of(w, "Blues", 0.0, 1.0)
    import base64
    import io

    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))  # [q, k, 4]
    assert (img == colour_png(z, "Blues", 0.0, 1.0)).all()
    for i in range(PNG_CACHE + 5):
        png_of(np.full((2, 2), i, np.float32), "Blues", 0.0, 1.0)
    assert len(matrix._PNGS) == PNG_CACHE


def test_a_row_of_head_buttons_wider_than_its_chart_becomes_a_dropdown():
    """minilm's 12 heads as buttons (57 px each) ran 690 px from the plot's left edge in Heatmaps' 476 px column
    at 1280 px: heads 7–11 fell off the chart and could not be pressed. A row that fits stays a row."""
    from attnlab.app.columns import column_px
    from attnlab.app.figures.fit import fit_width

    toks = [f"t{i}" for i in range(10)]
    width = column_px([3, 2], False, "medium")[0]
    for heads, kind in ((12, "dropdown"), (9, "dropdown"), (4, "buttons")):
        stack = np.random.default_rng(heads).random((6, heads, 10, 10)).astype(np.float32)  # [L, H, q, k]
        fig = fit_width(head_switcher(stack, toks, toks, 5, 0, list(range(6)), present=False), width)
        menus = {m.name: m for m in fig.layout.updatemenus}  # the last of each name: any layer's or head's
        assert menus["head"].type == kind, heads
        assert menus["layer"].type == "buttons" and len(menus["layer"].buttons) == 6  # 6 layers fit the row
        assert [len(m.buttons) for m in fig.layout.updatemenus if m.name == "head"] == [heads] * 6
