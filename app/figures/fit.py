"""Figures fitted to the width they are drawn at: tick labels thinned so none overlap (and the figure grown for
upright ones), titles wrapped, colour bars placed beside the plot, button rows too wide for their chart made
dropdowns, cell texts kept to what fits."""

from __future__ import annotations

import html
import re

import numpy as np
import plotly.graph_objects as go
from attnlab.app.figures.style import fit_title

# -- tick labels that never overlap ------------------------------------------------------------------------
CHAR_W, LINE_H = 0.62, 1.45  # a label character's width and a label's line pitch, over the font size (upright boxes)
TEXT_W = 0.5  # a cell text character's width over its font size (digits, as measured)
COLORBAR_PX = 90  # room a colour bar takes right of the plot


def _labels_px(texts, size: float) -> float:
    return max((len(html.unescape(str(t))) for t in texts), default=0) * CHAR_W * size


def _thin(ax, text: list, room_px: float, pitch_px: float) -> list:
    """Keep every k-th of an array axis's ticks so that each label has `pitch_px` within `room_px`; the labels
    kept."""
    vals = list(ax.tickvals)
    fits = max(1, int(room_px // pitch_px))
    k = -(-len(vals) // fits)  # ceil
    if k > 1:
        vals, text = vals[::k], text[::k]
    ax.tickvals, ax.ticktext = vals, text
    return text


def _array_axes(axes) -> list:
    """The axes whose ticks are an array of values (labelled by ticktext, else by the values)."""
    return [a for a in axes if a.tickmode == "array" and a.tickvals is not None and len(a.tickvals) > 1]


def _texts(ax) -> list[str]:
    return [str(t) for t in ax.ticktext] if ax.ticktext else [f"{v:g}" if isinstance(v, float) else str(v)
                                                               for v in ax.tickvals]


def _span(ax) -> float:
    d = ax.domain
    return (d[1] - d[0]) if d else 1.0


def fit_ticks(fig: go.Figure, width: int) -> go.Figure:
    """No two tick labels overlap when `fig` is drawn `width` px wide: an axis of array ticks whose labels do not
    fit side by side turns them upright (x) and keeps every k-th label (y: every k-th that fits the plot's
    height); hover still names each cell. A figure with fixed margins gets the room upright labels need below,
    and one whose upright labels sit above the plot grows by their room (the plot keeps its height);
    text written in heatmap cells too narrow for it is dropped."""
    size = fig.layout.font.size or 13
    height = fig.layout.height or 450
    m = fig.layout.margin
    fixed = m.autoexpand is False
    bar = any(getattr(t, "showscale", None) is not False and t.type in ("heatmap", "contour") for t in fig.data)
    xs, ys = _array_axes(fig.select_xaxes()), _array_axes(fig.select_yaxes())
    extent = {a.plotly_name: _extent(a) for a in xs + ys}  # cells each axis spans, before any thinning
    named = [v for t in fig.data if t.type in ("heatmap", "bar") for v in (t.y if t.y is not None else ())
             if isinstance(v, str)]  # a category axis: its labels are the traces' y values
    if fixed:
        left, right = m.l or 0, m.r or 0
    else:
        left = max([m.l or 0] + [_labels_px(_texts(a), a.tickfont.size or size) + 2 * size for a in ys]
                   + [_labels_px(named, size) + 2 * size, 5 * size])  # 5 sizes: a numeric axis's labels
        left += 1.5 * size if any(a.title.text for a in fig.select_yaxes()) else 0  # and its title
        right = max(m.r or 0, COLORBAR_PX if bar else 20)
    plot_w = max(width - left - right, 4 * size)
    below = 2 * size
    square = {a.scaleanchor: a for a in ys if a.scaleanchor}  # x name -> the y axis whose cells it keeps square
    for ax in xs:
        f = ax.tickfont.size or size
        text = _texts(ax)
        room = plot_w * _span(ax)
        if (y := square.get(ax.plotly_name.replace("axis", ""))) is not None:  # square cells: no wider than the
            tall = height - (m.t if m.t is not None else 60) - (m.b or 10)  # plot's height holds (labels below
            tall -= 0 if fixed else _labels_px(text, f) + f  # a growing margin take from it)
            room = min(room, max(tall, 4 * size) * _span(y) * extent[ax.plotly_name] / extent[y.plotly_name])
        flat = sum(len(html.unescape(t)) * CHAR_W * f + f for t in text)
        if ax.tickangle in (None, 0) and flat <= room:
            continue
        ax.tickangle = -90
        text = _thin(ax, text, room, LINE_H * f)
        need = _labels_px(text, f) + f
        below = max(below, need)
        side = "t" if ax.side == "top" else "b"
        if side == "t" and not fixed:  # labels above the plot: under the title, not over it; the figure grows
            title = fig.layout.title.text or ""  # by the room they take, so the plot keeps its height
            room = (60 + title.count("<br>") * int(1.3 * (size + 3))) if title else 20  # the title's part (layout)
            top = m.t if m.t is not None else 60
            m.t = max(top, room + int(need))
            fig.layout.height = height = height + m.t - top
        elif fixed and (m[side] or 0) < need + 2 * size + 12:  # upright labels: their room above or below the plot
            grow = int(need + 2 * size + 12 - (m[side] or 0))
            m[side] = (m[side] or 0) + grow
            fig.layout.height = height = height + grow
    top = m.t if m.t is not None else 60
    plot_h = height - top - (0 if fixed or any(a.side == "top" for a in xs) else below) - (m.b or 10)
    widths = {a.plotly_name.replace("axis", ""): plot_w * _span(a) for a in fig.select_xaxes()}
    cells = widths
    if not fixed:  # cell text: the plot as wide as its labels let it be (the estimate above leaves room to spare)
        left = max([m.l or 0] + [_labels_px(_texts(a), a.tickfont.size or size) + size for a in ys]
                   + [_labels_px(named, size) + size])
        full = max(width - left - (COLORBAR_PX if bar else 10), 4 * size)
        cells = {k: v * full / plot_w for k, v in widths.items()}
    _cell_text(fig, cells, size)
    every_row = isinstance(fig.layout.meta, dict) and fig.layout.meta.get("every_row")  # sized for each row's label
    for ax in [] if every_row else ys:
        room = plot_h * _span(ax)
        if ax.scaleanchor in widths:  # square cells: the plot is no taller than its width
            room = min(room, widths[ax.scaleanchor] * extent[ax.plotly_name] / extent.get(
                ax.scaleanchor.replace("x", "xaxis"), extent[ax.plotly_name]))
        _thin(ax, _texts(ax), max(room, LINE_H * size), LINE_H * (ax.tickfont.size or size))
    return fig


def fit_width(fig: go.Figure, width: int) -> go.Figure:
    """`fig` as drawn `width` px wide: its title wrapped (fit_title), its tick labels and cell text fitted
    (fit_ticks), its rows of buttons fitted (fit_menus), its colour bars next to the plot (fit_bars)."""
    return fit_bars(fit_menus(fit_ticks(fit_title(fig, width), width), width))


def fit_bars(fig: go.Figure) -> go.Figure:
    """Colour bars placed where they were not: at the plot's right edge, Plotly's 10 px pad away, on a chart of
    any width (its default x = 1.02 of the plot's width moves them right as a chart widens, and a bar's title
    ran past a 1430 px chart's edge, which the margins sized for the bar did not hold)."""
    for t in fig.data:
        bar = getattr(t, "colorbar", None)
        if bar is not None and bar.x is None:
            bar.x = 1.0
    return fig


BUTTON_PAD = 12  # px a Plotly button adds to its label (padding, border, the gap to the next; 57 px for "layer 0")


def fit_menus(fig: go.Figure, width: int) -> go.Figure:
    """A row of buttons wider than the room right of where it starts becomes a dropdown (Plotly neither wraps
    nor scrolls a row: the buttons past the chart's edge could not be seen or pressed). Every button of a row is
    as wide as its longest label."""
    size = fig.layout.font.size or 13
    for menu in fig.layout.updatemenus:
        if menu.type != "buttons" or menu.direction not in (None, "left", "right") or not menu.buttons:
            continue
        f = menu.font.size or size
        need = len(menu.buttons) * (max(len(html.unescape(b.label or "")) for b in menu.buttons) * CHAR_W * f
                                    + BUTTON_PAD)
        m = fig.layout.margin
        start = (m.l or 0) + max(menu.x or 0, 0) * (width - (m.l or 0) - (m.r or 0))  # x: a fraction of the plot
        if start + need > width:
            menu.update(type="dropdown", direction="down")
    return fig


def _cell_text(fig: go.Figure, widths: dict, size: float) -> None:
    """Drop the numbers or tokens written in heatmap cells narrower than their text (hover still shows them)."""
    for t in fig.data:
        if t.type != "heatmap" or not t.texttemplate or t.z is None or not len(t.z):
            continue
        fmt = re.fullmatch(r"%\{z:([^}]*)\}", t.texttemplate)
        if "%{text}" in t.texttemplate and t.text is not None:
            chars = max((len(html.unescape(str(v))) for row in t.text for v in np.ravel(row)), default=0)
        else:  # the values as the template writes them (a d3 format Python does not read: 5 characters)
            chars = _written(np.asarray(t.z, dtype=np.float64), fmt.group(1) or "g") if fmt else 5
        cell = widths.get(t.xaxis or "x", 0) / max(len(t.z[0]), 1)
        if chars * TEXT_W * (t.textfont.size or size) > cell:
            t.texttemplate = ""


def _written(z: np.ndarray, fmt: str) -> int:
    """The longest of the finite values of `z` written with format `fmt`."""
    try:
        return max((len(format(v, fmt)) for v in z[np.isfinite(z)]), default=0)
    except ValueError:
        return 5


def _extent(ax) -> float:
    """How many cells an array axis spans (its ticks' range and one)."""
    v = list(ax.tickvals) if ax.tickvals is not None else []
    if not v or not all(isinstance(t, (int, float, np.number)) for t in v):  # categories: one cell each
        return float(max(len(v), 1))
    return float(max(v) - min(v) + 1)
