"""The image figures (app.figures.image) checked by their data: traces, cell placement, outlines, tiles."""

import base64
import io

import numpy as np
import pytest
from attnlab.app.figures.image import (
    cell_size,
    distance_figure,
    grid_lines,
    image_figure,
    outline_segments,
    overlay_figure,
    overlay_mosaic,
    png_uri,
    position_similarity_figure,
)
from PIL import Image

IMG = (np.arange(8 * 12 * 3).reshape(8, 12, 3) % 256).astype(np.uint8)  # [H=8, W=12, 3], grid 2×3: 4-px cells


def _decode(uri: str) -> np.ndarray:
    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def _segments(xs, ys) -> set:
    pts = [(x, y) for x, y in zip(xs, ys)]
    return {tuple(sorted(pts[i:i + 2])) for i in range(0, len(pts), 3)}


def test_png_round_trips_and_cells_divide():
    np.testing.assert_array_equal(_decode(png_uri(IMG)), IMG)
    assert cell_size(IMG.shape, (2, 3)) == (4, 4)
    with pytest.raises(ValueError, match="does not cut"):
        cell_size(IMG.shape, (3, 3))


def test_grid_lines_sit_on_patch_boundaries():
    xs, ys = grid_lines(IMG.shape, (2, 3))
    segs = _segments(xs, ys)
    assert len(segs) == 3 + 4  # rows + 1 horizontal, cols + 1 vertical
    assert ((-0.5, 3.5), (11.5, 3.5)) in segs and ((3.5, -0.5), (3.5, 7.5)) in segs


def test_outline_of_one_cell_is_its_four_edges():
    m = np.zeros((3, 3), bool)
    m[1, 2] = True
    segs = _segments(*outline_segments(m, (2, 3)))  # cells 2 px high, 3 px wide
    assert segs == {((5.5, 1.5), (8.5, 1.5)), ((5.5, 3.5), (8.5, 3.5)), ((5.5, 1.5), (5.5, 3.5)),
                    ((8.5, 1.5), (8.5, 3.5))}
    two = np.zeros((2, 2), bool)
    two[0] = True  # two cells side by side: 6 outer edges, none between them
    assert len(_segments(*outline_segments(two))) == 6


def test_image_figure_has_image_grid_and_outline():
    mask = np.zeros(IMG.shape[:2], bool)
    mask[0:4, 4:8] = True  # exactly patch 0,1
    fig = image_figure(IMG, (2, 3), title="img", outline=mask)
    assert [t.type for t in fig.data] == ["image", "scatter", "scatter"]
    assert fig.data[2].name == "ground truth" and len(_segments(fig.data[2].x, fig.data[2].y)) == 16  # 4×4 pixel edges
    assert fig.layout.meta == {"grid": [2, 3], "size": [8, 12]}


def test_overlay_places_each_patch_on_its_cell():
    m = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    region = np.zeros((2, 3))
    region[1, 2] = 0.5
    fig = overlay_figure(IMG, m, outline=region, query=1)
    image, heat, query, truth = fig.data
    assert image.type == "image" and heat.type == "heatmap"
    np.testing.assert_allclose(np.asarray(heat.z), m)
    assert (heat.x0, heat.dx, heat.y0, heat.dy) == (1.5, 4, 1.5, 4)  # patch c centred at 4c + 1.5
    assert heat.text[1][2] == "1,2" and heat.zmax == pytest.approx(0.5)
    assert heat.colorscale[0][1].endswith(",0)") and heat.colorscale[-1][1].startswith("rgba")  # clear at 0
    assert _segments(query.x, query.y) == _segments(*outline_segments(np.eye(1, 6, 1, dtype=bool).reshape(2, 3), (4, 4)))
    assert ((7.5, 3.5), (11.5, 3.5)) in _segments(truth.x, truth.y)  # the top edge of patch 1,2
    with pytest.raises(ValueError, match="fits neither"):
        overlay_figure(IMG, m, outline=np.ones((5, 5)))


def test_mosaic_is_one_image_and_one_heatmap_with_gutters():
    maps = np.random.default_rng(0).random((5, 2, 3)).astype(np.float32)
    fig = overlay_mosaic(IMG, maps, [f"head {i}" for i in range(5)], per_row=3, outline=np.eye(2, 3))
    assert [t.type for t in fig.data] == ["image", "heatmap", "scatter"]
    tiled = _decode(fig.data[0].source)
    assert tiled.shape == (2 * 8 + 4, 3 * 12 + 2 * 4, 4)  # 2 rows of tiles, 3 per row, one-patch gutters
    np.testing.assert_array_equal(tiled[12:20, 16:28, :3], IMG)  # tile 4 (row 1, column 1)
    assert (tiled[8:12, :, 3] == 0).all() and (tiled[12:20, 32:, 3] == 0).all()  # gutter and the empty 6th tile
    z = np.asarray(fig.data[1].z, dtype=np.float64)
    assert z.shape == (5, 11)
    np.testing.assert_allclose(z[3:5, 4:7], maps[4] / maps[4].max(), rtol=1e-6)
    assert np.isnan(z[2]).all() and np.isnan(z[:, 3]).all() and np.isnan(z[3:, 8:]).all()
    assert fig.data[1].text[3][4].startswith("head 4 · patch 0,0")
    assert [a.text for a in fig.layout.annotations] == [f"head {i}" for i in range(5)]
    assert len(_segments(fig.data[2].x, fig.data[2].y)) == 5 * 8  # two diagonal patches per tile


def test_labels_are_escaped():
    fig = overlay_mosaic(IMG, np.ones((1, 2, 3)), ["<b>h</b> & x"])
    assert fig.layout.annotations[0].text == "&lt;b&gt;h&lt;/b&gt; &amp; x"


def test_distance_figure_one_point_per_head_and_layer():
    d = np.array([[1.0, 2, 3], [4, 5, 6]])  # [L=2, H=3]
    fig = distance_figure(d)
    assert len(fig.data) == 3 and [t.name for t in fig.data] == ["head 0", "head 1", "head 2"]
    np.testing.assert_allclose(fig.data[1].x, [0, 1])  # the middle of three heads: not nudged
    np.testing.assert_allclose(fig.data[0].x, [-0.1, 0.9])
    np.testing.assert_allclose(fig.data[2].x, [0.1, 1.1])
    np.testing.assert_array_equal(fig.data[0].customdata, [0, 1])
    np.testing.assert_array_equal(fig.data[1].y, [2, 5])
    assert list(fig.layout.xaxis.tickvals) == [0, 1] and list(fig.layout.xaxis.ticktext) == ["0", "1"]


def test_position_similarity_grid_of_grids():
    rows, cols = 2, 3
    sim = np.random.default_rng(1).uniform(-1, 1, (6, rows, cols)).astype(np.float32)
    fig = position_similarity_figure(sim)
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    assert z.shape == (rows * 3 - 1, cols * 4 - 1)
    np.testing.assert_allclose(z[3:5, 4:7], sim[4], rtol=1e-6)  # patch 1,1's row of similarities
    assert np.isnan(z[2]).all() and np.isnan(z[:, 3]).all()
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-1, 1)
    with pytest.raises(ValueError):
        position_similarity_figure(sim[:5])
