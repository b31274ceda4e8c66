"""Plotly figure builders, one module per kind of picture. They take numbers and token labels and return a
`go.Figure`; none of them draws on the page (the pages pass the figure to `frame.chart`).

* style     — what every figure shares: escaped token labels, font sizes, layout, colours.
* matrix    — one [query, key] matrix (pooled or sent as a PNG when large) and the marks drawn on it.
* mosaic    — every layer × head of a stack as one heatmap with NaN gutters.
* head_view — BertViz-style lines from one query token to every key, one colour per head.
* rows      — one row per method, per head or per generation step, over the tokens.
* grids     — small labelled grids and tables with their numbers (statistics, steps, positions, |Δ|).
* bars      — a bar per token or per generation step, and a box of scores per head.
* lines     — line charts: entropy against temperature, small |Δ| on a log axis, time and memory against T.
* overview  — the Long inputs page: a pooled overview of one head in row bands, and an exact window of it.

Conventions: token labels are escaped before they reach Plotly (which reads `<b>` as markup), matrices sit
on integer axes so repeated tokens never merge, masked cells are NaN on the grey background, and one trace
is used where one will do.
"""
