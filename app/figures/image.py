"""Figures over an image cut into patches: the image with its patch grid, a [rows, cols] map as a translucent
overlay, one small overlay per head in one figure, the ground-truth outline on top, and the ViT paper's two
pictures (mean attention distance per head by layer; position-embedding similarity on the patch grid).

The image goes as one PNG data URI (never a list of pixels); pixel (0, 0) spans [-0.5, 0.5], so patch c of a
cell width w spans [c·w - 0.5, (c + 1)·w - 0.5]. Maps are heatmaps placed on those cells.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import DIVERGING, HEAD_COLORS, apply_layout, esc
from PIL import Image

# transparent at 0, an opaque warm glow at the maximum: the image shows through where the map is low
# (never opaque: the image stays visible under a flat map)
OVERLAY_SCALE = [[0.0, "rgba(255,40,0,0)"], [0.4, "rgba(255,90,0,0.35)"], [0.75, "rgba(255,170,0,0.55)"],
                 [1.0, "rgba(255,255,90,0.72)"]]
OUTLINE = "#00e5ff"  # the ground-truth outline: cyan reads on the image and on the overlay's colours
GRID = "rgba(255,255,255,0.45)"


# -- pieces --------------------------------------------------------------------------------------------------
def png_uri(image: np.ndarray) -> str:
    """A uint8 [H, W, 3] (or [H, W, 4]) image as a PNG data URI."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def cell_size(shape: tuple[int, int], grid: tuple[int, int]) -> tuple[int, int]:
    """Pixels per patch (height, width) of an image of `shape` (H, W) cut into `grid` (rows, cols)."""
    (h, w), (rows, cols) = shape[:2], grid
    if rows < 1 or cols < 1 or h % rows or w % cols:
        raise ValueError(f"a {h}×{w} image does not cut into a {rows}×{cols} patch grid")
    return h // rows, w // cols


def grid_lines(shape: tuple[int, int], grid: tuple[int, int], x0: float = 0, y0: float = 0):
    """(xs, ys) of the patch boundaries as one polyline with None breaks."""
    (h, w), (rows, cols) = shape[:2], grid
    ch, cw = cell_size(shape, grid)
    xs, ys = [], []
    for r in range(rows + 1):
        xs += [x0 - 0.5, x0 + w - 0.5, None]
        ys += [y0 + r * ch - 0.5] * 2 + [None]
    for c in range(cols + 1):
        xs += [x0 + c * cw - 0.5] * 2 + [None]
        ys += [y0 - 0.5, y0 + h - 0.5, None]
    return xs, ys


def outline_segments(mask: np.ndarray, cell: tuple[float, float] = (1, 1), x0: float = 0, y0: float = 0):
    """(xs, ys): every edge between a True cell of `mask` [m, n] and a False one (or the border), as segments
    with None breaks; cells are `cell` (height, width) pixels."""
    m = np.pad(np.asarray(mask, bool), 1)  # [m + 2, n + 2]
    ch, cw = cell
    xs, ys = [], []
    horiz = m[1:, 1:-1] != m[:-1, 1:-1]  # [m + 1, n]: an edge above row i
    for i, j in zip(*np.nonzero(horiz)):
        xs += [x0 + j * cw - 0.5, x0 + (j + 1) * cw - 0.5, None]
        ys += [y0 + i * ch - 0.5] * 2 + [None]
    vert = m[1:-1, 1:] != m[1:-1, :-1]  # [m, n + 1]: an edge left of column j
    for i, j in zip(*np.nonzero(vert)):
        xs += [x0 + j * cw - 0.5] * 2 + [None]
        ys += [y0 + i * ch - 0.5, y0 + (i + 1) * ch - 0.5, None]
    return xs, ys


def _outline(outline, shape, grid, x0=0, y0=0):
    """Segments of a pixel mask bool [H, W] or a patch region float [rows, cols] (patches with any share)."""
    o = np.asarray(outline)
    if o.shape == tuple(shape[:2]):
        return outline_segments(o.astype(bool), (1, 1), x0, y0)
    if o.shape == tuple(grid):
        return outline_segments(o > 0, cell_size(shape, grid), x0, y0)
    raise ValueError(f"an outline of shape {o.shape} fits neither the image {shape[:2]} nor the grid {grid}")


def _image_axes(fig: go.Figure, h: float, w: float) -> None:
    fig.update_xaxes(visible=False, range=[-0.5, w - 0.5], constrain="domain")
    fig.update_yaxes(visible=False, range=[h - 0.5, -0.5], scaleanchor="x", constrain="domain")


def _line(xs, ys, color, width, name) -> go.Scatter:
    return go.Scatter(x=xs, y=ys, mode="lines", line={"color": color, "width": width}, name=name,
                      hoverinfo="skip", showlegend=False)


# -- one image -------------------------------------------------------------------------------------------------
def image_figure(image: np.ndarray, grid: tuple[int, int], *, title: str = "", present: bool = False,
                 outline=None) -> go.Figure:
    """The image with its patch grid (and the ground-truth outline when given)."""
    h, w = image.shape[:2]
    fig = go.Figure(go.Image(source=png_uri(image), name="image", hoverinfo="skip"))
    fig.add_trace(_line(*grid_lines(image.shape, grid), GRID, 1, "patch grid"))
    if outline is not None:
        fig.add_trace(_line(*_outline(outline, image.shape, grid), OUTLINE, 3, "ground truth"))
    _image_axes(fig, h, w)
    return apply_layout(fig, title, present, 420, meta={"grid": list(grid), "size": [h, w]})


def overlay_figure(image: np.ndarray, map_: np.ndarray, *, title: str = "", present: bool = False, outline=None,
                   query: int | None = None, opacity: float = 1.0, value_name: str = "weight",
                   height: int = 460) -> go.Figure:
    """A [rows, cols] map as a heatmap over the image (clear at 0, a glow at the maximum: OVERLAY_SCALE); the query patch (index into the grid, row
    major) boxed, the ground-truth outline on top."""
    z = np.asarray(map_, dtype=np.float32)  # [rows, cols]
    grid = z.shape
    ch, cw = cell_size(image.shape, grid)
    h, w = image.shape[:2]
    fig = go.Figure(go.Image(source=png_uri(image), name="image", hoverinfo="skip"))
    labels = [[f"{r},{c}" for c in range(grid[1])] for r in range(grid[0])]
    fig.add_trace(go.Heatmap(z=z, x0=cw / 2 - 0.5, dx=cw, y0=ch / 2 - 0.5, dy=ch, colorscale=OVERLAY_SCALE,
                             opacity=opacity, text=labels, name=value_name, zmin=0.0,
                             zmax=float(z.max()) if np.isfinite(z).any() and z.max() > 0 else 1.0,
                             colorbar={"title": {"text": value_name}, "thickness": 14},
                             hovertemplate=f"patch %{{text}}<br>{value_name} %{{z:.4f}}<extra></extra>"))
    if query is not None:
        r, c = divmod(int(query), grid[1])
        sel = np.zeros(grid, bool)
        sel[r, c] = True
        fig.add_trace(_line(*outline_segments(sel, (ch, cw)), "#ffffff", 3, "query patch"))
    if outline is not None:
        fig.add_trace(_line(*_outline(outline, image.shape, grid), OUTLINE, 3, "ground truth"))
    _image_axes(fig, h, w)
    return apply_layout(fig, title, present, height, meta={"grid": list(grid), "size": [h, w]})


# -- many small overlays -------------------------------------------------------------------------------------
def overlay_mosaic(image: np.ndarray, maps: np.ndarray, labels: list[str], *, per_row: int = 4, title: str = "",
                   present: bool = False, outline=None, value_name: str = "weight") -> go.Figure:
    """One small overlay per map (e.g. every head of a layer), tiled with a one-patch gutter: ONE image trace
    (the tiles, transparent gutters) and ONE heatmap (NaN gutters), each map scaled to its own maximum."""
    maps = np.asarray(maps, dtype=np.float32)  # [n, rows, cols]
    n, rows, cols = maps.shape
    ch, cw = cell_size(image.shape, (rows, cols))
    h, w = image.shape[:2]
    nc, nr = min(per_row, n), -(-n // per_row)
    tiled = np.zeros((nr * (h + ch) - ch, nc * (w + cw) - cw, 4), np.uint8)  # [H', W', RGBA], gutters clear
    z = np.full((nr * (rows + 1) - 1, nc * (cols + 1) - 1), np.nan, np.float32)  # [rows', cols']: NaN gutters
    text = np.full(z.shape, "", dtype=object)
    xs, ys, notes = [], [], []
    for i in range(n):
        tr, tc = divmod(i, nc)
        py, px_ = tr * (h + ch), tc * (w + cw)
        tiled[py:py + h, px_:px_ + w, :3] = image[..., :3]
        tiled[py:py + h, px_:px_ + w, 3] = 255
        top = maps[i].max()
        z[tr * (rows + 1):tr * (rows + 1) + rows, tc * (cols + 1):tc * (cols + 1) + cols] = \
            maps[i] / top if top > 0 else maps[i]
        text[tr * (rows + 1):tr * (rows + 1) + rows, tc * (cols + 1):tc * (cols + 1) + cols] = \
            [[f"{esc(labels[i], 20)} · patch {r},{c} · {maps[i, r, c]:.4f}" for c in range(cols)] for r in range(rows)]
        if outline is not None:
            ox, oy = _outline(outline, image.shape, (rows, cols), px_, py)
            xs += ox
            ys += oy
        notes.append({"x": px_ + w / 2 - 0.5, "y": py - 0.5, "text": esc(labels[i], 20), "showarrow": False,
                      "yanchor": "bottom", "font": {"size": 12 if not present else 16}})
    fig = go.Figure(go.Image(source=png_uri(tiled), name="image", hoverinfo="skip"))
    fig.add_trace(go.Heatmap(z=z, x0=cw / 2 - 0.5, dx=cw, y0=ch / 2 - 0.5, dy=ch, colorscale=OVERLAY_SCALE,
                             zmin=0.0, zmax=1.0, text=text.tolist(), hoverongaps=False,
                             colorbar={"title": {"text": f"{value_name} / max"}, "thickness": 14},
                             hovertemplate="%{text}<extra></extra>", name=value_name))
    if outline is not None:
        fig.add_trace(_line(xs, ys, OUTLINE, 2, "ground truth"))
    H, W = tiled.shape[:2]
    _image_axes(fig, H, W)
    fig.update_layout(annotations=notes)
    height = int(min(900, 120 + nr * 230))
    return apply_layout(fig, title, present, height, top=80,
                        meta={"tiles": n, "per_row": nc, "grid": [rows, cols], "size": [h, w]})


# -- the ViT paper's two pictures ------------------------------------------------------------------------------
def distance_figure(dist: np.ndarray, *, title: str = "", present: bool = False, unit: str = "pixels") -> go.Figure:
    """Mean attention distance [L, H]: layer on x, distance on y, one point per head (one colour per head, each
    head nudged sideways by a fixed step so equal values stay visible)."""
    d = np.asarray(dist, dtype=np.float64)  # [L, H]
    n_layers, n_heads = d.shape
    fig = go.Figure()
    for h in range(n_heads):
        nudge = 0.3 * (h - (n_heads - 1) / 2) / max(n_heads, 1)
        fig.add_trace(go.Scatter(x=np.arange(n_layers) + nudge, y=d[:, h], mode="markers", name=f"head {h}",
                                 customdata=np.arange(n_layers),
                                 marker={"color": HEAD_COLORS[h % len(HEAD_COLORS)], "size": 11 if present else 9},
                                 hovertemplate=f"layer %{{customdata}} · head {h}<br>%{{y:.1f}} {unit}<extra></extra>"))
    fig.update_xaxes(title="layer", tickmode="array", tickvals=list(range(n_layers)),
                     ticktext=[str(i) for i in range(n_layers)])
    fig.update_yaxes(title=f"mean attention distance ({unit})", rangemode="tozero")
    return apply_layout(fig, title, present, 380, legend={"orientation": "h", "y": -0.25})


def position_similarity_figure(sim: np.ndarray, *, title: str = "", present: bool = False) -> go.Figure:
    """Cosine similarity [N, rows, cols] of each patch's position embedding with every other patch's, laid out
    on the patch grid: a grid of small grids (tile (r, c) is patch r,c's row), ONE heatmap with NaN gutters."""
    s = np.asarray(sim, dtype=np.float32)  # [N, rows, cols]
    n, rows, cols = s.shape
    if n != rows * cols:
        raise ValueError(f"{n} patches do not fill a {rows}×{cols} grid")
    z = np.full((rows * (rows + 1) - 1, cols * (cols + 1) - 1), np.nan, np.float32)  # NaN gutters
    for p in range(n):
        r, c = divmod(p, cols)
        z[r * (rows + 1):r * (rows + 1) + rows, c * (cols + 1):c * (cols + 1) + cols] = s[p]
    fig = go.Figure(go.Heatmap(z=z, colorscale=DIVERGING, zmin=-1.0, zmax=1.0, hoverongaps=False,
                               colorbar={"title": {"text": "cosine"}, "thickness": 14},
                               hovertemplate="cosine %{z:.3f}<extra></extra>"))
    centres = [r * (rows + 1) + rows / 2 - 0.5 for r in range(rows)]
    fig.update_xaxes(title="input patch column", tickmode="array", tickvals=[c * (cols + 1) + cols / 2 - 0.5
                                                                             for c in range(cols)],
                     ticktext=[str(c) for c in range(cols)], showgrid=False, zeroline=False, constrain="domain")
    fig.update_yaxes(title="input patch row", tickmode="array", tickvals=centres, ticktext=[str(r) for r in range(rows)],
                     autorange="reversed", scaleanchor="x", showgrid=False, zeroline=False, constrain="domain")
    return apply_layout(fig, title, present, 560, plot_bgcolor="rgba(0,0,0,0)", meta={"grid": [rows, cols]})
