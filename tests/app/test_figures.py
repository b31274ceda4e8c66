"""Figure builders tested by their data: shapes, tick text, NaN under the mask, pooling, one trace."""

from __future__ import annotations

import numpy as np
import plotly.io as pio
from attnlab.app.figures.bars import box_stats, score_boxes
from attnlab.app.figures.head_view import head_view
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.figures.rows import method_rows

from tests.app.conftest import z_of


def _json(fig) -> dict:
    import json

    return json.loads(pio.to_json(fig))


def test_matrix_heatmap_escapes_labels_keeps_repeats_and_masks():
    tokens = ["<b>", "a", "&", "a", "</b>"]
    m = np.tril(np.full((5, 5), 0.2, np.float32))
    mask = np.tril(np.ones((5, 5), bool))
    spec = _json(matrix_heatmap(m, tokens, tokens, mask=mask, title="t"))
    (trace,) = spec["data"]
    x = spec["layout"]["xaxis"]
    assert x["ticktext"] == ["&lt;b&gt;", "a", "&amp;", "a", "&lt;/b&gt;"]
    z = z_of(trace)
    assert np.isnan(z[np.triu_indices(5, 1)]).all() and np.allclose(np.diag(z), 0.2)
    assert trace["text"][2][1] == "&amp; → a"
    assert spec["layout"]["meta"]["pooled"] is False


def test_matrix_heatmap_integer_axes_for_repeated_tokens():
    fig = matrix_heatmap(np.eye(4), ["x"] * 4, ["x"] * 4)
    xaxis = fig.layout.xaxis
    assert list(xaxis.tickvals) == [0, 1, 2, 3] and list(xaxis.ticktext) == ["x"] * 4
    assert list(fig.data[0].x) == [0, 1, 2, 3]


def test_large_matrix_is_pooled_with_a_notice():
    t = 600
    m = np.random.default_rng(0).random((t, t)).astype(np.float32)
    fig = matrix_heatmap(m, [str(i) for i in range(t)], [str(i) for i in range(t)], title="big")
    assert fig.layout.meta["pooled"] is True and "pooled (max over 2×2 blocks)" in fig.layout.title.text
    assert fig.layout.meta["shape"] == [300, 300] and fig.data[0].type == "heatmap"
    assert fig.data[0].z.dtype == np.float32 and fig.data[0].z.shape == (300, 300)


def test_very_large_matrix_goes_as_a_colour_png():
    t = 400  # 160,000 cells: above PNG_CELLS, below the pooling threshold
    m = np.tril(np.random.default_rng(0).random((t, t)))
    fig = matrix_heatmap(m, ["a"] * t, ["a"] * t, mask=np.tril(np.ones((t, t), bool)))
    assert fig.data[0].type == "image" and fig.data[0].source.startswith("data:image/png;base64,")
    assert fig.layout.meta["pooled"] is False


def test_mid_size_matrix_is_float32_heatmap_without_per_cell_text():
    t = 200
    fig = matrix_heatmap(np.zeros((t, t)), ["a"] * t, ["a"] * t)
    assert fig.data[0].type == "heatmap" and fig.data[0].z.dtype == np.float32 and fig.data[0].text is None


def test_mosaic_is_one_heatmap_with_nan_gutters():
    a = np.random.default_rng(1).random((3, 2, 5, 5)).astype(np.float32)
    fig = mosaic(a, list("abcde"), list("abcde"), mask=np.tril(np.ones((5, 5), bool)))
    assert len(fig.data) == 1 and fig.data[0].type == "heatmap"
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (3 * 6 - 1, 2 * 6 - 1)
    assert np.isnan(z[5]).all() and np.isnan(z[:, 5]).all()
    np.testing.assert_allclose(z[6:11, 6:11][np.tril_indices(5)], a[1, 1][np.tril_indices(5)])
    assert len(set(fig.data[0].x)) == len(fig.data[0].x) and len(set(fig.data[0].y)) == len(fig.data[0].y)
    assert list(fig.layout.xaxis.ticktext) == ["head 0", "head 1"]


def test_mosaic_sets_kv_groups_apart_and_names_their_kv_head():
    a = np.random.default_rng(3).random((1, 4, 5, 5)).astype(np.float32)  # 4 query heads, 2 k/v heads
    fig = mosaic(a, list("abcde"), list("abcde"), kv_group=2)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (5, 5 + 1 + 5 + 3 + 5 + 1 + 5)  # gutters: 1 inside a group, 3 between groups
    assert np.isnan(z[:, 11:14]).all() and not np.isnan(z[:, 14]).any()
    np.testing.assert_allclose(z[:, 14:19], a[0, 2])  # head 2 opens the second group
    assert list(fig.layout.xaxis.ticktext) == ["head 0 · kv 0", "head 1 · kv 0", "head 2 · kv 1", "head 3 · kv 1"]
    assert fig.layout.meta["kv_group"] == 2


def test_mosaic_pools_heads_over_the_cell_budget():
    a = np.random.default_rng(2).random((4, 4, 100, 100))
    fig = mosaic(a, [str(i) for i in range(100)], [str(i) for i in range(100)], max_cells=16 * 50 * 50)
    assert fig.layout.meta["pooled"] is True and fig.layout.meta["cell"] == [50, 50]
    assert "pooled" in fig.layout.title.text


def test_head_view_lines_grow_with_weight():
    p = np.zeros((2, 4, 4))
    p[:, 3] = [0.1, 0.2, 0.3, 0.4]
    fig = head_view(p, list("abcd"), list("abcd"), query=3, heads=[0, 1], bins=4)
    lines = [t for t in fig.data if t.mode == "lines" and t.x and t.x[0] is not None]
    assert lines and len(lines) <= 2 * 4
    widths = sorted({t.line.width for t in lines})
    assert len(widths) >= 3
    heavy = max(lines, key=lambda t: t.line.width)
    assert heavy.opacity == max(t.opacity for t in lines)
    assert fig.layout.meta["query"] == 3


def test_method_rows_scale_without_the_query():
    fig = method_rows({"m": [0.1, 0.2, 10.0]}, ["a", "b", "c"], exclude=2)
    z = np.asarray(fig.data[0].z)
    np.testing.assert_allclose(z[0], [0.5, 1.0, 1.0])


def test_score_boxes_send_statistics_not_every_score():
    import json

    a = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    a[1, 3, 0] = 1000.0  # an outlier outside the fences
    mask = np.tril(np.ones((4, 4), bool))
    s = box_stats(a, mask)
    visible0 = a[0][mask]
    assert s["median"][0] == np.median(visible0) and s["q1"][0] == np.percentile(visible0, 25)
    assert s["upperfence"][1] == 31.0 and abs(s["mean"][1] - 122.2) < 1e-4
    fig = json.loads(pio.to_json(score_boxes(a, mask)))
    box = fig["data"][0]
    assert box["type"] == "box" and "y" not in box
    big = np.random.default_rng(0).normal(size=(12, 512, 512)).astype(np.float32)
    assert len(pio.to_json(score_boxes(big, np.ones((512, 512), bool)))) < 20_000


def test_head_view_labels_every_kth_token_of_a_long_text_and_the_strongest_keys():
    n = 512
    p = np.full((1, n, n), 1e-4)
    p[0, n - 1, 333] = 0.9  # the last query attends to key 333, which is not a multiple of the label step
    toks = [f"t{i}" for i in range(n)]
    fig = head_view(p, toks, toks, query=n - 1, heads=[0])
    queries, keys = fig.data[-3], fig.data[-1]
    step = int(keys.customdata[1][0] - keys.customdata[0][0])
    assert step > 1 and (fig.layout.height - 120) / n * step >= 13 + 3  # labels a font's height apart
    assert len(queries.text) == len(range(0, n, step)) - ((n - 1) % step == 0)  # the query: its own label
    assert [int(j) for j, _ in keys.customdata] == sorted(set(range(0, n, step)) | {333})
    assert keys.text[list(keys.customdata[:, 0]).index(333)] == "t333"
    small = head_view(p[:, :8, :8], toks[:8], toks[:8], query=7, heads=[0])
    assert len(small.data[-1].text) == 8  # short texts: every token


def test_matrix_margins_hold_the_longest_labels_and_the_colour_bar():
    from attnlab.app.figures.matrix import label_margins

    m = label_margins(["a", "&lt;tok&gt;"], ["abcdefghij"], size=11, colorbar=True)  # "<tok>": 5 characters shown
    assert m == {"l": int(10 * 0.62 * 11 + 22 + 16), "b": int(5 * 0.62 * 11 * 0.87 + 22 + 20), "r": 90}
    fig = matrix_heatmap(np.full((3, 3), 1 / 3), ["x", "yy", "zzz"], ["x", "yy", "zzz"], showscale=False)
    assert fig.layout.margin.r == 10 and fig.layout.margin.l == int(3 * 0.62 * 11 + 22 + 16)
    assert fig.layout.xaxis.ticklabeloverflow == "allow" and fig.layout.yaxis.ticklabeloverflow == "allow"
