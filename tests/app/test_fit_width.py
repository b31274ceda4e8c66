"""A figure fitted to the width it is drawn at (app.figures.fit.fit_width, which frame.chart applies): token
axes thinned and turned upright where their labels do not fit, every kept label still at its own position, long
titles wrapped with the room they need, cell text dropped where cells are narrower than it; and the widths the
page's columns get (app.columns.column_px). The browser half is tests/e2e/test_page_labels.py."""

from __future__ import annotations

import numpy as np
from attnlab.app.columns import GAP_PX, column_px
from attnlab.app.figures.fit import LINE_H, fit_width
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.style import MAIN_PX, fit_title, layout, tick_labels

TOKENS = ["[BOS]"] + [f"tok{i % 7}" for i in range(63)]  # 64 tokens, repeated names at different positions


def matrix(n: int = 64, present: bool = True):
    z = np.random.default_rng(0).random((n, n)).astype(np.float32)  # [q, k]
    return matrix_heatmap(z, TOKENS[:n], TOKENS[:n], present=present, title="layer 0, head 0")


def test_a_long_token_axis_is_thinned_upright_and_keeps_its_positions():
    fig = fit_width(matrix(), MAIN_PX[True])
    x, y = fig.layout.xaxis, fig.layout.yaxis
    assert x.tickangle == -90
    labels = tick_labels(TOKENS)
    for ax in (x, y):
        vals = [int(v) for v in ax.tickvals]
        assert 2 <= len(vals) < 64 and np.all(np.diff(vals) == vals[1] - vals[0])  # every k-th cell
        assert list(ax.ticktext) == [labels[v] for v in vals]  # each label names the token at its own position
    pitch = LINE_H * x.tickfont.size
    assert len(x.tickvals) * pitch <= MAIN_PX[True] - fig.layout.margin.l - fig.layout.margin.r
    assert "tok6" in fig.data[0].text[63][62]  # hover still names every cell


def test_a_short_axis_and_a_wide_chart_keep_every_label():
    fig = fit_width(matrix(8, present=False), MAIN_PX[False])
    assert [int(v) for v in fig.layout.xaxis.tickvals] == list(range(8)) == [int(v) for v in fig.layout.yaxis.tickvals]
    wide = fit_width(matrix(64, present=False), MAIN_PX[False])
    narrow = fit_width(matrix(64, present=False), column_px(3, False)[0])
    assert len(narrow.layout.xaxis.tickvals) < len(wide.layout.xaxis.tickvals) <= 64


def test_upright_labels_get_their_room_below_a_fixed_margin():
    fig = matrix()
    b, h = fig.layout.margin.b, fig.layout.height
    fit_width(fig, MAIN_PX[True])
    assert fig.layout.margin.b - b == fig.layout.height - h >= 0  # the plot keeps its height
    need = max(len(t) for t in fig.layout.xaxis.ticktext) * 0.62 * fig.layout.xaxis.tickfont.size
    assert fig.layout.margin.b >= need


def test_a_long_title_is_wrapped_with_the_room_it_needs():
    import plotly.graph_objects as go

    title = "Each new token's attention (mean of heads, layer 3) — the replay of the whole generation"
    fig = go.Figure(layout=layout(title, True, 400))
    t, h = fig.layout.margin.t, fig.layout.height
    fit_title(fig, 300)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 3 and " ".join(lines) == title
    assert all(len(line) <= (300 - 24) / (0.5 * 21) for line in lines)  # 21 px: the title's font presenting
    assert fig.layout.margin.t - t == fig.layout.height - h == (len(lines) - 1) * int(1.3 * 21)
    short = go.Figure(layout=layout("layer 0, head 0", True, 400))
    assert fit_title(short, 300).layout.title.text == "layer 0, head 0"


def test_cell_text_is_dropped_only_where_cells_are_narrower_than_it():
    small = np.arange(16, dtype=float).reshape(4, 4) / 16  # [4, 4]
    big = np.random.default_rng(1).random((4, 64))  # [4, 64]
    cols = [f"c{i}" for i in range(64)]
    kept = fit_width(grid_heatmap(small, list("abcd"), cols[:4], present=True), 534)
    dropped = fit_width(grid_heatmap(big, list("abcd"), cols, present=True), 534)
    assert kept.data[0].texttemplate and not dropped.data[0].texttemplate
    wide = fit_width(grid_heatmap(big[:, :8], list("abcd"), cols[:8], present=False), MAIN_PX[False])
    assert wide.data[0].texttemplate  # 8 columns in 820 px: the values stay


def test_column_widths():
    assert column_px(3, False) == [int((820 - 2 * 16) / 3)] * 3
    assert column_px([3, 2], True, "medium") == [int((534 - 38) * 3 / 5), int((534 - 38) * 2 / 5)]
    assert column_px(1, False, min_width=300) == [820]  # one column: the main column at 1280 px
    assert column_px(2, False, min_width=300) == [int((820 - 16) / 2)] * 2  # both in a row from 1280 px on


def test_a_wrapping_column_is_fitted_to_the_least_width_any_window_gives_it():
    """Backends' three matrices (min 300 px) were fitted to 534 px, one a row at 1024×768 presenting, but at
    1280×720 presenting two share a row at 387 px: 20 pairs of their tick labels overlapped. A wrapping column
    never gets less than min_width, nor less than it gets at the narrowest window."""
    presenting_1280 = int((790 - GAP_PX) / 2)  # main column 790 px: two a row
    assert column_px(3, True, min_width=300) == [300] * 3 and 300 <= presenting_1280
    assert column_px(2, True, min_width=440) == [440, 440]  # one a row at 1024 px, two at 1386 px and wider
    plain = {1280: int((820 - GAP_PX) / 2), 1400: int((940 - 2 * GAP_PX) / 3)}  # 2 a row, 3 a row
    assert column_px(3, False, min_width=300) == [300] * 3 and 300 <= min(plain.values())


def test_upright_labels_above_the_plot_grow_the_figure_not_squeeze_the_plot():
    """Backends' grid of max |Δ| (two rows, column labels on top): at its column's width (484 px at 1280 px, 455
    px presenting) the labels turn upright and took 258–361 px of a 240–267 px figure, so the plot was -28 to
    -104 px tall (a blank chart with a collapsed colour bar)."""
    from attnlab.app.figures.grids import delta_grid

    for present, width in ((False, column_px([3, 2], False, "medium")[0]), (True, 455), (False, 1400)):
        fig = delta_grid([[1e-7, 2e-7], [3e-8, 1e-9]], ["blocks.0.attn", "blocks.1.attn"],
                         ["sdpa vs eager: pattern", "flash vs eager: pattern"], 1e-5,
                         title="Max |Δ pattern| per layer (tolerance 1e-05)", present=present)
        fit_title(fig, width)
        m = fig.layout.margin
        plot_before = fig.layout.height - (m.t if m.t is not None else 60) - m.b
        fit_width(fig, width)
        upright = fig.layout.xaxis.tickangle == -90
        assert upright == (width < 1400), width  # narrow: the labels turn upright above the plot
        assert fig.layout.height - fig.layout.margin.t - fig.layout.margin.b == plot_before >= 2 * 40, width


def test_a_square_matrix_thins_its_key_labels_to_the_plots_height():
    """Square cells make the plot as wide as it is tall (480 px of a 820 px column): the key labels are thinned
    to that width, not the column's (37 labels were kept 13 px apart, under their 16 px pitch)."""
    toks = ["[BOS]"] + [f"w{i % 8}" for i in range(72)]
    fig = fit_width(matrix_heatmap(np.zeros((73, 73), np.float32), toks, toks, present=False, title="rollout"),
                    MAIN_PX[False])
    m, x = fig.layout.margin, fig.layout.xaxis
    assert fig.layout.yaxis.scaleanchor == "x"
    side = fig.layout.height - m.t - m.b  # the square plot's side: its height (narrower than the column)
    assert side < MAIN_PX[False] - m.l - m.r
    assert 2 <= len(x.tickvals) <= side / (LINE_H * x.tickfont.size)
