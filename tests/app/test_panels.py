"""Panels that switch head and layer together in the browser (app.figures.panels, the Masks page): every button
shows, in every panel, exactly the data of the server-side panel of that head; the page stays in its budget."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.app.figures.matrix import masked, matrix_heatmap
from attnlab.app.figures.panels import TITLE_PX, Panel, panel_grid, panel_layers, run_panels
from attnlab.model.registry import load

from .conftest import ok, open_page, panel, specs, widget, z_of

TEXT = "masks, heads and layers"
PANEL = {"max_side": 256, "png_cells": 128 * 128, "max_ticks": 16}  # as the Masks page draws them


@pytest.fixture(scope="module")
def rows():
    lm = load("random-decoder")
    inp = lm.encode(TEXT)
    a, b = lm.capture(inp), lm.capture(inp, mask=("sliding_window", 3))
    return [run_panels("A", a, "self"), run_panels("B", b, "self")], a


def shown_by(fig, vis) -> dict[str, object]:
    """panel title → the one trace `vis` shows in it."""
    out = {}
    for trace, v in zip(fig.data, vis):
        if v:
            title = trace.name.split(" · ")[0]
            assert title not in out, f"two traces shown in {title}"
            out[title] = trace
    return out


def test_which_layers_the_panels_carry(rows):
    rows, _ = rows  # 4 panels per head (scores and weights, A and B); the masks are per layer
    assert panel_layers(rows, 4, 4, 20, 20, 1, 128 * 128) == [0, 1, 2, 3]  # 64 panels × 20² × 4 B = 102 kB
    assert panel_layers(rows, 4, 4, 64, 64, 1, 128 * 128) == [1]  # 1 MB for all layers, 262 kB for one
    assert panel_layers(rows, 12, 12, 100, 100, 5, 128 * 128) is None  # one layer: 1.9 MB
    assert panel_layers(rows, 2, 2, 129, 129, 0, 128 * 128) is None  # PNG panels: the server switches
    assert panel_layers(rows[:1], 4, 4, 64, 64, 1, 128 * 128) == [0, 1, 2, 3]  # one row: 2 per head, 524 kB


def test_every_button_shows_each_panels_server_figure_of_its_head(rows):
    rows, cap = rows
    L, H = len(cap.sites("self")), cap.n_heads
    layers = panel_layers(rows, L, H, *cap.records[cap.sites("self")[0]].mask_for().shape, 1, 128 * 128)
    assert layers == list(range(L))
    fig = panel_grid(rows, *cap.group_tokens("self"), 1, 0, H, layers, **PANEL)
    panels = [p for r in rows for p in r]
    assert fig.layout.meta["panels"] == [p.title for p in panels]
    qt, kt = cap.group_tokens("self")
    buttons = [(b.args[1]["title.text"], b.args[0]["visible"]) for m in fig.layout.updatemenus for b in m.buttons]
    assert len(buttons) == L * H + H * L  # each layer's head row and each head's layer row
    buttons.append(("<b>layer 1, head 0</b>", [t.visible for t in fig.data]))  # as first drawn
    for title, vis in buttons:
        lyr, h = (int(w.strip(",")) for w in title[3:-4].split()[1::2])
        shown = shown_by(fig, vis)
        assert list(shown) == [p.title for p in panels]
        for i, p in enumerate(panels):
            m, mask = p.of(lyr, h)
            server = matrix_heatmap(m, qt, kt, mask=mask, kind=p.kind, zrange=p.zrange, showscale=False, **PANEL).data[0]
            got = np.asarray(shown[p.title].z, dtype=np.float64)
            assert np.array_equal(got, np.asarray(server.z, dtype=np.float64), equal_nan=True), (title, p.title)
            assert (shown[p.title].zmin, shown[p.title].zmax) == (server.zmin, server.zmax)
            assert shown[p.title].xaxis == f"x{i + 1 if i else ''}" and shown[p.title].yaxis == f"y{i + 1 if i else ''}"
    # the capture's own numbers, masked: the sliding window of B hides keys more than 2 back
    w = np.asarray(shown_by(fig, buttons[-1][1])["B: attention weights"].z, dtype=np.float64)
    i, j = np.indices(w.shape)
    assert np.isnan(w[(j > i) | (i - j >= 3)]).all() and not np.isnan(w[(j <= i) & (i - j < 3)]).any()
    rec = cap.records[cap.sites("self")[1]]
    a = np.asarray(shown_by(fig, buttons[-1][1])["A: attention weights"].z, dtype=np.float64)
    assert np.allclose(a, masked(rec.pattern(0), rec.mask_for()), equal_nan=True, atol=1e-7)


def test_a_mask_is_one_trace_unless_it_differs_by_layer():
    t = 6
    toks = [f"t{i}" for i in range(t)]
    stack = np.random.default_rng(1).random((3, 2, t, t)).astype(np.float32)  # [L, H, q, k]
    i, j = np.indices((t, t))
    same = Panel("same", lambda lyr, h: (np.ones((t, t), np.float32), j <= i), zrange=(0, 1), per_head=False)
    window = Panel("window", lambda lyr, h: (np.ones((t, t), np.float32), (j <= i) & (i - j <= lyr)),
                   zrange=(0, 1), per_head=False)
    weights = Panel("weights", lambda lyr, h: (stack[lyr, h], None))
    fig = panel_grid([[same, window, weights]], toks, toks, 2, 1, 2, [0, 1, 2])
    names = [tr.name for tr in fig.data]
    assert [n for n in names if n.startswith("same")] == ["same · L2H1"]  # one trace, shown for every head
    assert [n for n in names if n.startswith("window")] == ["window · L2H1", "window · L0H1", "window · L1H1"]
    owners = dict(zip(names, fig.layout.meta["owners"]))
    assert owners["same · L2H1"] is None
    assert owners["window · L0H1"] == [[0, 0], [0, 1]] and owners["window · L2H1"] == [[2, 0], [2, 1]]
    assert len([n for n in names if n.startswith("weights")]) == 6
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    ys = {m.name: round((m.y - 1) * plot_px, 6) for m in fig.layout.updatemenus}
    assert ys == {"head": TITLE_PX, "layer": TITLE_PX + 34}  # above the panel titles, a button row apart


def test_masks_page_sends_the_panels_and_keeps_url_state():
    at = open_page("masks", model="random-decoder", text=TEXT, layer=1, head=2)
    ok(at)
    fig = next(s for s in specs(at) if "panels" in (s["layout"].get("meta") or {}))
    assert fig["layout"]["title"]["text"] == "layer 1, head 2" and len(fig["layout"]["updatemenus"]) == 2 + 4  # random-decoder: 2 layers × 4 heads
    assert any("switch all six panels in the browser" in c.value for c in at.caption)
    assert sum(len(str(s)) for s in specs(at)) < 2_000_000
    widget(at, "head").set_value(0).run()  # the server-side choice still works and lands in the URL
    ok(at)
    lm = load("random-decoder")
    cap = lm.capture(lm.encode(TEXT))
    rec = cap.records[cap.sites("self")[1]]
    got = z_of(panel(at, "A: attention weights"))
    assert at.query_params["head"] == "0"
    assert np.allclose(got, masked(rec.pattern(0), rec.mask_for()), equal_nan=True, atol=1e-6)


def test_long_texts_send_png_panels_without_buttons():
    at = open_page("masks", model="random-long-decoder", text="ab" * 80)  # 161 tokens: PNG panels
    ok(at)
    fig = next(s for s in specs(at) if "panels" in (s["layout"].get("meta") or {}))
    assert not fig["layout"].get("updatemenus") and {t["type"] for t in fig["data"]} == {"image"}
    assert len(fig["data"]) == 6
    assert not any("switch all six panels" in c.value for c in at.caption)
