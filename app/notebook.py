"""The app's figures in a Jupyter notebook (or any Python session), without Streamlit.

    import attnlab.model as model
    from attnlab.app.notebook import show, to_html
    run = model.load("lecture-decoder").run("the cat sat on the mat")
    show(run, "heads")                     # every layer × head (the Heatmaps page's mosaic)
    show(run, "head", layer=0, head=1)     # one head up close (the Heatmaps page)
    show(run, "headview", layer=0)         # BertViz-style lines from the query token (the Heatmaps page)
    show(run, "rollout")                   # the rollout matrix (the Rollout page's "As matrices")
    show(run, "tokens")                    # where the query token looks, head mean per layer (the Explore page)
    attributions(model.load("lecture-decoder"), "the cat sat on the mat")  # seven methods' rows (the Rollout page)
    why_attend(model.load("lecture-decoder"), "the cat sat on the mat", layer=3, head=2)  # QK attribution (Heads page)
    sinks(model.load("smollm2"), "share")  # each head's share on the first token, sink heads ringed (the Sinks page)
    open("heads.html", "w").write(to_html(show(run, "heads")))   # one self-contained file, works offline

Each view calls the same app/figures builder with the same arguments as its page, with the page's defaults
(the last layer, head 0, the query token the page starts on: the [MASK] or the last token). Nothing here
imports Streamlit: the builders need it only to pick a PNG colour scale for very large matrices, and then
fall back to Streamlit's default theme when no app is running (its "missing ScriptRunContext" warning,
which says it "can be ignored when running in bare mode", is filtered out).
"""

from __future__ import annotations

import logging

import numpy as np
import plotly.graph_objects as go
from attnlab.analysis.attention.flow import MAX_TOKENS as FLOW_MAX
from attnlab.analysis.attention.flow import attention_flow
from attnlab.analysis.attention.rollout import attention_rollout, cross_rollout, fuse_heads
from attnlab.analysis.machinery.window_ppl import window_test
from attnlab.analysis.probes.attributions import attribute
from attnlab.analysis.probes.context_mixing import context_mixing
from attnlab.analysis.probes.context_mixing import refusal as mixing_refusal
from attnlab.analysis.probes.qk_attribution import qk_attribution
from attnlab.analysis.probes.relevance import gradient_relevance
from attnlab.analysis.probes.sinks import SINK_SHARE, measure_sinks
from attnlab.app.figures.fit import fit_width
from attnlab.app.figures.head_view import head_view, head_view_title
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.figures.qk import qk_terms, why_title
from attnlab.app.figures.rows import method_rows
from attnlab.app.figures.sinks import NORM_NAMES, norm_lines, ppl_bars, share_grid
from attnlab.app.figures.style import esc
from attnlab.app.figures.switcher import head_switcher, switch_layers
from attnlab.app.presets import default_query
from attnlab.model.captured import GROUP_LABELS, CapturedRun

VIEWS = ("heads", "head", "headview", "rollout", "tokens")
# as on pages/heatmaps.py
KINDS = {"pattern": "attention weights (softmax)", "scores": "raw scores (scaled QKᵀ, before the mask)",
         "masked": "masked scores (what the softmax sees)"}
FUSE = {"none": "every head", "mean": "mean over heads", "max": "max over heads"}


class _BareMode(logging.Filter):
    """Drop Streamlit's 'missing ScriptRunContext' warning: a notebook has no Streamlit runtime, by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "missing ScriptRunContext" not in record.getMessage()


logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(_BareMode())


def show(run: CapturedRun, view: str = "heads", layer: int | None = None, head: int | None = None,
         group: str | None = None, width: int | None = None, **kw) -> go.Figure:
    """The figure a page draws for `run` (a CapturedRun from LoadedModel.run), as a Plotly Figure.

    view: 'heads' | 'head' | 'headview' | 'rollout' | 'tokens'. layer (default the last), head (default 0)
    and group ('self', or 'encoder' / 'decoder' / 'cross' for an encoder–decoder; default as on the page)
    choose the attention. Keywords, with the pages' defaults:
      query=int      the query token (default: the [MASK] or the last token)
      kind='pattern' | 'scores' | 'masked'     (heads, head)
      fuse='none' | 'mean' | 'max'             (heads, head, headview)
      pool='max' | 'mean'                      (head: how a matrix above 512 per side is pooled)
      heads='selected' | 'all'                 (headview)
      residual=0.5, fusion='mean', discard=0.0 (rollout)
      present=False                            (larger fonts, as in presentation mode)
    width: the px it is drawn at: its title and tick labels fitted to it as on the page (None: every label kept).
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    groups = run.groups()
    if group is None:
        group = "cross" if "cross" in groups else next(iter(groups))
    if group not in groups:
        raise ValueError(f"unknown group {group!r}; this run has {', '.join(groups)}")
    unknown = set(kw) - {"query", "kind", "fuse", "pool", "heads", "residual", "fusion", "discard", "present"}
    if unknown:
        raise TypeError(f"show() got unexpected keywords: {', '.join(sorted(unknown))}")
    fig = {"heads": _heads, "head": _head, "headview": _headview, "rollout": _rollout,
           "tokens": _tokens}[view](run, group, layer, head, **kw)
    return fig if width is None else fit_width(fig, width)


def to_html(fig: go.Figure) -> str:
    """A whole HTML page with plotly.js embedded (no CDN): opens offline, in any browser."""
    return fig.to_html(include_plotlyjs=True, full_html=True, include_mathjax=False)


# -- the views ----------------------------------------------------------------------------------------------
def _stack(run, group, kind, fuse):
    """(shown [L, H or 1, q, k], mask or None, kind for the colour scale), as pages/heatmaps.py builds them."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    if fuse not in FUSE:
        raise ValueError(f"unknown fuse {fuse!r}; choose one of {', '.join(FUSE)}")
    stack = run.matrices(group, kind)  # [L, H, q, k]
    if fuse != "none":
        stack = fuse_heads(stack, fuse)[:, None]  # [L, 1, q, k]
    vmask = run.mask_of(group) if kind != "scores" else None  # raw scores are shown unmasked, by definition
    return stack, vmask, "pattern" if kind == "pattern" else "scores"


def _pick(n: int, value: int | None, default: int, what: str) -> int:
    value = default if value is None else int(value)
    if not 0 <= value < n:
        raise ValueError(f"{what} {value} is outside 0..{n - 1}")
    return value


def _query(run, qt, group, query) -> int:
    default = default_query(run, None) if group != "encoder" else len(qt) - 1
    return _pick(len(qt), query, min(default, len(qt) - 1), "query")


def _heads(run, group, layer, head, kind="pattern", fuse="none", present=False, **_):
    qt, kt = run.group_tokens(group)
    shown, vmask, vkind = _stack(run, group, kind, fuse)
    title = f"{GROUP_LABELS.get(group, group)} — {KINDS[kind]}" + ("" if fuse == "none" else f", {FUSE[fuse]}")
    return mosaic(shown, qt, kt, mask=vmask, kind=vkind, title=title, present=present,
                  layer_labels=[f"layer {i}" for i in range(shown.shape[0])])


def _head(run, group, layer, head, kind="pattern", fuse="none", pool="max", query=None, present=False, **_):
    qt, kt = run.group_tokens(group)
    shown, vmask, vkind = _stack(run, group, kind, fuse)
    layer = _pick(shown.shape[0], layer, shown.shape[0] - 1, "layer")
    head = 0 if fuse != "none" else _pick(shown.shape[1], head, 0, "head")
    name = f"layer {layer}, " + (f"head {head}" if fuse == "none" else FUSE[fuse])
    layers = switch_layers(*shown.shape, layer) if fuse == "none" else None  # as the Heatmaps page: its buttons
    if layers:  # switch the other heads in the browser
        return head_switcher(shown, qt, kt, layer, head, layers, mask=vmask, kind=vkind, present=present,
                             mark=(_query(run, qt, group, query), None))
    return matrix_heatmap(shown[layer, head], qt, kt, mask=vmask, kind=vkind, title=name, present=present,
                          pool=pool, mark=(_query(run, qt, group, query), None))


def _headview(run, group, layer, head, fuse="none", heads="selected", query=None, present=False, **_):
    qt, kt = run.group_tokens(group)
    pats = run.matrices(group)  # [L, H, q, k]
    if fuse != "none":
        pats = fuse_heads(pats, fuse)[:, None]  # [L, 1, q, k]
    layer = _pick(pats.shape[0], layer, pats.shape[0] - 1, "layer")
    head = 0 if fuse != "none" else _pick(pats.shape[1], head, 0, "head")
    query = _query(run, qt, group, query)
    shown = [head] if heads == "selected" else list(range(pats.shape[1]))
    return head_view(pats[layer], qt, kt, query, shown, present=present,
                     title=head_view_title(query, layer, head if heads == "selected" and fuse == "none" else None))


def _rollout(run, group, layer, head, residual=0.5, fusion="mean", discard=0.0, query=None, present=False, **_):
    """Self-attention groups: attention_rollout of the group's patterns [L, H, T, T] → [T, T]. 'cross' (an
    encoder–decoder): cross_rollout's source side [T, S], as the Rollout page shows it."""
    if group == "cross":
        tokens = run.group_tokens("decoder")[0]
        cr = cross_rollout(run.matrices("encoder"), run.matrices("decoder"), run.matrices("cross"),
                           residual, fusion, discard)
        m, qa, ka, which = cr.source, tokens, run.src_tokens, "rollout (source side)"
    else:
        tokens = run.group_tokens(group)[0]
        m = attention_rollout(run.matrices(group), residual, fusion, discard)  # [T, T]
        qa, ka, which = tokens, tokens, "rollout"
    q = _query(run, qa, group, query)
    return matrix_heatmap(m, qa, ka, kind="pattern", title=f"{which}: row = output, column = input",
                          present=present, mark=(q, None))


def _tokens(run, group, layer, head, query=None, present=False, **_):
    qt, kt = run.group_tokens(group)
    stack = run.matrices(group)  # [L, H, q, k]
    q = _query(run, qt, group, query)
    per_layer = fuse_heads(stack[:, :, q:q + 1, :], "mean")[:, 0]  # [L, k]: head-mean row of each layer
    return method_rows({f"layer {i}": np.asarray(per_layer[i]) for i in range(len(per_layer))}, kt,
                       title=f"Where does token {q} ({esc(qt[q])}) look? Head mean per layer",
                       present=present, exclude=q if group != "cross" else None)


MIXING_LABELS = {"attention_norm": "attention norm", "value_zeroing": "value zeroing"}  # as on pages/rollout.py
GRADIENT_LABELS = {"input_x_gradient": "input × gradient", "integrated_gradients": "integrated gradients",
                   "attention_x_gradient": "attention × gradient"}  # as on pages/rollout.py


def attributions(lm, text: str, query: int | None = None, src: str | None = None, target_id: int | None = None,
                 present: bool = False) -> go.Figure:
    """The Rollout page's "Which tokens matter" rows for `text` on `lm` (a LoadedModel with a prediction head), at
    the page's defaults: last-layer attention, rollout, flow (T ≤ 64, one self-attention stack), attention norm and
    value zeroing (analysis.probes.context_mixing, where they apply; an encoder–decoder's target rows: its decoder's
    self-attention), gradient relevance and the three gradient
    attributions (analysis.probes.attributions) for the logit of `target_id` (None: predicted)."""
    inputs = lm.encode(text, src)
    run = lm.run(inputs=inputs)
    group = "decoder" if run.has_source else "self"
    tokens = run.group_tokens(group)[0]
    q = _query(run, tokens, group, query)
    dec = run.matrices(group)  # [L, H, T, T]
    rows = {"last-layer attention": fuse_heads(dec[-1], "mean")[q]}
    if run.has_source:
        rows["rollout"] = cross_rollout(run.matrices("encoder"), dec, run.matrices("cross")).target[q]
    else:
        rows["rollout"] = attention_rollout(dec)[q]
        if len(tokens) <= FLOW_MAX:
            rows["flow"] = attention_flow(dec.astype(np.float64), q)
    s = len(run.group_tokens("encoder")[0]) if run.has_source else None
    for m, label in MIXING_LABELS.items():
        zeroing = m == "value_zeroing"
        if mixing_refusal(lm, len(tokens) if zeroing else None, s if zeroing else None) is None:
            mix = context_mixing(lm, inputs, m)  # [L, T, T]; an encoder–decoder's: its decoder's self-attention
            rows[label] = (mix.decoder if run.has_source else mix)[-1, q]  # the last layer's row
    rows["gradient relevance"] = gradient_relevance(lm, inputs, q, target_id).row
    for m, label in GRADIENT_LABELS.items():
        rows[label] = attribute(lm, inputs, m, q, target_id).row
    return method_rows(rows, tokens, present=present, exclude=q,
                       title=f"Which tokens matter for token {q} ({esc(tokens[q])})?")


def why_attend(lm, text: str, layer: int | None = None, head: int = 0, query: int | None = None,
               key: int | None = None, pairs: int = 12, present: bool = False) -> go.Figure:
    """The Heads page's "Why does this head attend here?" for `text` on `lm` (a converted decoder or encoder): the
    parts of the `pairs` largest terms of the head's score at (query, key) as a query-side × key-side matrix
    (analysis.probes.qk_attribution), at the page's defaults: the last layer, the [MASK] or last token, its most attended
    key."""
    inputs = lm.encode(text)
    tokens = list(inputs.tokens)
    layer = _pick(lm.cfg.n_layers, layer, lm.cfg.n_layers - 1, "layer")
    query = _pick(len(tokens), query, tokens.index("[MASK]") if "[MASK]" in tokens else len(tokens) - 1, "query")
    a = qk_attribution(lm, inputs, layer, head, query, key)
    qs, ks, m = a.top_matrix(pairs)
    return qk_terms(qs, ks, m, present=present, title=why_title(a))
SINK_VIEWS = ("share", "norms", "window")


def sinks(lm, view: str = "share", norm: str = "out", window: int | None = None, present: bool = False) -> go.Figure:
    """The Attention sinks page's figures for `lm` over its sink texts (analysis.probes.sinks): 'share' (layers × heads, the
    mean weight on the first token, sink heads ringed), 'norms' (`norm` = key | value | out | resid per layer: the
    first token against the others) or 'window' (the window test's perplexities, W = `window` or the default)."""
    if view not in SINK_VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {', '.join(SINK_VIEWS)}")
    if view == "window":
        w = window_test(lm, window).to_json()
        return ppl_bars(w, present=present, title=f"perplexity over {w['tokens']:,} tokens, window of {w['window']} keys")
    r = measure_sinks(lm)
    if view == "share":
        return share_grid(r.share, SINK_SHARE, present=present,
                          title=f"{lm.name}: each head's mean weight on the first token ({r.n_texts} texts)")
    if norm not in NORM_NAMES:
        raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(NORM_NAMES)}")
    if r.norms is None:
        raise ValueError(r.note)
    return norm_lines(r.norms, norm, present=present,
                      title=f"{NORM_NAMES[norm]} per layer: the first token against the others")
