"""What every figure shares: token labels made safe for Plotly and Markdown, font sizes for the projector,
the common layout, and the colours (the theme's sequential scale, the diverging scale, the masked grey, one
colour per head)."""

from __future__ import annotations

import html
import re

import numpy as np
import plotly.express as px
import plotly.graph_objects as go
from attnlab.analysis.probes.ig_baseline import REPLACED

THEME_SCALE = None  # no colorscale: the Streamlit theme's own sequential scale, which the browser adapts to light and dark
DIVERGING = "RdBu_r"
MASKED_BG = "rgba(128,128,128,0.28)"  # the plot background: NaN (masked) cells show it
# Saturated colours, readable on light and dark themes; orange and red are kept for the query/source marks.
HEAD_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
               *px.colors.qualitative.Dark24]
FLOOR = 1e-12  # |Δ| values of exactly 0 sit here on log axes


# -- labels ------------------------------------------------------------------------------------------------
def esc(label: str, limit: int = 14) -> str:
    """A token label safe for Plotly text: shortened, then `&`, `<`, `>` escaped."""
    s = str(label)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=False)


def md(label: str, limit: int = 30) -> str:
    """A token label safe inside st.markdown / st.caption / st.subheader: shortened, then set as an inline
    code span (fenced by more backticks than it holds), so `[x](url)`, bare URLs, `**`, `$…$` or `<b>` in a
    token show as typed — backslash escapes would not stop Markdown from auto-linking a bare URL."""
    s = str(label)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    if not s:
        return ""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""  # CommonMark strips one space from each side
    return f"{fence}{pad}{s}{pad}{fence}"


def baseline_md(name: str) -> str:
    """Integrated gradients' baseline in words (ig_baseline.baseline_name) safe inside st.caption: the token it names
    (<|end_of_text|>, </s>, [PAD] …) set by `md` as an inline code span."""
    head, sep, token = name.partition(REPLACED)
    return f"{head}{sep}{md(token, 60)}" if sep and token else name


def tick_labels(tokens, limit: int = 14) -> list[str]:
    """`esc` of every token."""
    return [esc(t, limit) for t in tokens]


# -- layout ------------------------------------------------------------------------------------------------
def head_names(n_heads: int, kv_group: int = 1) -> list[str]:
    """'head h', with ' · kv g' (the k/v head it shares) when runs of kv_group > 1 heads share one."""
    return [f"head {h}" + (f" · kv {h // kv_group}" if kv_group > 1 else "") for h in range(n_heads)]


def font_size(present: bool) -> int:
    """The base font size: larger in presentation mode."""
    return 18 if present else 13


def cell_px(present: bool) -> int:
    """The side of a matrix cell that holds its tick label (the tick font at −60°, or a level label's line)."""
    return 22 if present else 16


# Tick labels may overflow the chart: Plotly's default for numeric axes ("hide past div") measures every label
# against the div on every draw, a third of the browser's time per widget change on Masks (CPU profile).
AXIS = {"ticklabeloverflow": "allow"}
TITLE_CHAR = 0.5  # a bold title character's width over the font size, a little over the average (0.44 measured)


def wrap(title: str, width: int, present: bool = False) -> str:
    """`title` broken at spaces (`<br>`) into lines that fit `width` px in the title's font."""
    chars = max(12, int(width / (TITLE_CHAR * (font_size(present) + 3))))
    lines: list[str] = []
    for word in title.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def fit_title(fig: go.Figure, width: int) -> go.Figure:
    """A title longer than `width` px broken into lines that fit (`wrap`), the top margin and the height grown by
    the lines added: no title is cut at the chart's edges."""
    t = fig.layout.title
    if not t.text:
        return fig
    fs = (t.font.size if t.font and t.font.size else (fig.layout.font.size or 13) + 3)
    chars = max(12, int((width - 24) / (TITLE_CHAR * fs)))
    if max(len(html.unescape(re.sub(r"<[^>]+>", "", line))) for line in t.text.split("<br>")) <= chars:
        return fig
    words = t.text.replace("<br>", " ").split(" ")
    lines: list[str] = []
    for word in words:
        if lines and len(html.unescape(lines[-1])) + 1 + len(html.unescape(word)) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    grow = (len(lines) - 1 - t.text.count("<br>")) * int(1.3 * fs)
    t.text = "<br>".join(lines)
    if grow > 0:
        m = fig.layout.margin
        m.t = (m.t if m.t is not None else 60) + grow
        t.pad.t = (t.pad.t or 0) + grow // 2
        fig.layout.height = (fig.layout.height or 450) + grow
    return fig


def title_lines_px(title: str, present: bool) -> int:
    """The height in px of a title's lines after its first (`wrap` breaks them with `<br>`)."""
    return title.count("<br>") * int(1.3 * (font_size(present) + 3))


def layout(title: str, present: bool, height: int | None = None, top: int | None = None, **kw) -> dict:
    """Title, font, margins and height shared by every figure, plus `kw`: a layout for go.Figure(layout=…). A title
    of several lines (`wrap`) gets their height added to the top margin."""
    more = title_lines_px(title, present)
    return {"title": {"text": title, "font": {"size": font_size(present) + 3}, "y": 1, "yref": "container",
                      "yanchor": "top", "pad": {"t": 14 + more // 2}},  # at the top (Plotly centres a title's lines)
            "font": {"size": font_size(present)},
            "margin": {"l": 10, "r": 10, "t": (top or (60 if title else 20)) + more, "b": 10},
            "height": height, **kw,
            "xaxis": AXIS | kw.get("xaxis", {}), "yaxis": AXIS | kw.get("yaxis", {})}


def apply_layout(fig: go.Figure, title: str, present: bool, height: int | None = None,
                 top: int | None = None, **kw) -> go.Figure:
    """`layout` set on a built figure."""
    fig.update_layout(layout(title, present, height, top, **kw))
    return fig


def legend_under(fig: go.Figure, items: int) -> go.Figure:
    """The legend one item a line at the bottom of the figure, under the x axis's title, with room made for it
    (a legend inside the plot area covers ticks and lines once a narrow or large-font layout wraps it)."""
    room = items * int(1.8 * (fig.layout.font.size or 13)) + 8  # px: one line per item
    fig.update_layout(showlegend=True, legend={"orientation": "v", "yref": "container", "y": 0, "yanchor": "bottom",
                                               "x": 0, "xanchor": "left"},
                      margin_b=(fig.layout.margin.b or 0) + room, height=(fig.layout.height or 450) + room)
    return fig


def log_ticks(values) -> dict:
    """Ticks of a log axis over `values`, each labelled with its whole number ("0.002", "500", "2k"), never the
    bare digit Plotly writes at minor ticks: powers of ten, plus 2× and 5× when the values span under two
    decades. A dict for update_xaxes/update_yaxes."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=object)) if x is not None], dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return {}
    lo, hi = int(np.floor(np.log10(v.min()))), int(np.ceil(np.log10(v.max())))
    steps = (1,) if np.log10(v.max() / v.min()) > 2 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps if v.min() / 1.5 <= m * 10.0 ** e <= v.max() * 1.5]
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [_tick(t) for t in ticks]}


def _tick(x: float) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:g}{unit}"
    return f"{x:g}"


def log_floor(v) -> np.ndarray:
    """|Δ| values for a log axis: exact zeros raised to FLOOR."""
    return np.maximum(np.asarray(v, dtype=np.float64), FLOOR)


# The main column's width in px (measured in chromium) at the narrowest window each mode is made for: 1024×768
# presenting (the sidebar open, its 19-px rem) and 1280×720 without (940 px at 1400, 1460 at 1920). Charts thin
# their tick labels to the width they get (app.frame.chart): a wider window gives them more room, never less.
MAIN_PX = {True: 534, False: 820}
# A figure printed in the handout is drawn PRINT_PX wide (app/tour/handout.py figure_width("a4"), the narrower paper):
# what must fit a figure's width fits the narrower of this and the main column.
PRINT_PX = 703
