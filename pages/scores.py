"""Score scales (/scores): pre-softmax score sizes per head, and the softmax collapsing without 1/√d_k."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.attention.scores import (
    counterfactual_softmax,
    effective_keys,
    saturation,
    score_stats,
    score_steps_table,
)
from attnlab.app.chart_link import anchor, link
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads
from attnlab.app.figures.bars import score_boxes
from attnlab.app.figures.lines import lines
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.switcher import head_switcher, switch_layers
from attnlab.app.frame import chart, options, page, presenting, switch_caption
from attnlab.app.inputs import require
from attnlab.app.url_state import group_select, index, slider, toggle

TAUS = np.round(np.geomspace(0.1, 10, 13), 3)


def score_rows(stats: pd.DataFrame) -> pd.DataFrame:
    """score_stats' one wide row per head as two narrow rows per head: q·kᵀ, then the scaled score."""
    parts = [stats[["head", *(f"{p}_{k}" for k in ("mean", "std", "min", "max"))]].set_axis(
        ["head", "mean", "std", "min", "max"], axis=1).assign(score=name) for p, name in
        (("raw", "q·kᵀ"), ("scaled", "scaled score"))]
    return pd.concat(parts).sort_values("head", kind="stable")[["head", "score", "mean", "std", "min", "max"]]

with page("Score scales", "Why divide by √d_k? What happens to the softmax when the scores grow?"):
    inp = require(("has_qk",), "rescales the raw scores q·kᵀ")
    cap = inp.capture()
    present = presenting()
    groups = cap.groups()
    with options():
        c1, c2, c3 = st.columns(3) if len(groups) > 1 else (None, *st.columns(2))
        group = group_select(groups, where=c1)
        sites = cap.sites(group)
        layer = index("Layer", len(sites), "layer", 0, where=c2)
        head = index("Head", cap.n_heads, "head", 0, where=c3)
    rec = cap.records[sites[layer]]
    qt, kt = cap.group_tokens(group)
    mask = rec.mask_for()
    d_k = round(1 / rec.scale**2)

    st.subheader(f"Score distributions, layer {layer}")
    raw_view = toggle("Show raw QKᵀ (without the 1/√d_k factor)", "raw_view", False)
    scores = rec.raw_qk() if raw_view else rec.scores()
    chart(score_boxes(scores, mask, present=present, name="QKᵀ" if raw_view else "scaled score",
                      title=f"{'raw QKᵀ' if raw_view else 'scaled scores QKᵀ/√d_k'} per head "
                            f"(visible pairs only; d_k = {d_k})"), key="boxes", name="scores")

    patterns = rec.pattern()  # [H, q, k]
    stats = score_stats({sites[layer]: rec.raw_qk()}, rec.scale, mask=mask, bias=rec.bias, softcap=rec.softcap)
    sat = saturation(patterns, mask)  # [H, 2]
    eff = effective_keys(patterns, mask)  # [H, q]
    table = stats.drop(columns=["site"]).assign(
        **{"saturated >0.9": sat[:, 0], "saturated >0.99": sat[:, 1],
           "effective keys (mean)": np.nanmean(eff, axis=-1)})
    fmt = {c: st.column_config.NumberColumn(format="%.3f") for c in ("mean", "std", "min", "max")}
    st.dataframe(score_rows(stats), hide_index=True, column_config=fmt)  # narrow: whole at 1024 px too
    st.dataframe(table[["head", "saturated >0.9", "saturated >0.99", "effective keys (mean)"]], hide_index=True,
                 column_config={c: st.column_config.NumberColumn(format="%.3f") for c in table.columns[-3:]})
    st.caption("Effective keys = exp(entropy): 1 for a one-hot row, n for a uniform row over n keys. "
               "Saturated = share of rows whose largest weight exceeds 0.9 / 0.99 (almost no gradient to the rest).")

    steps = score_steps_table(rec.score_steps(head), mask)
    st.markdown(f"**From q·kᵀ to the score the softmax sees** (layer {layer}, head {head}; visible pairs):")
    st.dataframe(steps, hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.4f")
                                                        for c in ("mean", "std", "min", "max")})
    if rec.softcap is not None:
        st.caption(f"This model soft-caps its scores: cap·tanh(score/cap) with cap = {rec.softcap:g} keeps every "
                   "score within ±cap before the mask, however large q·kᵀ grows.")

    st.subheader("Take away the √d_k — or turn the temperature")
    c1, c2 = st.columns(2)
    use_scale = toggle("Divide by √d_k", "sqrt_dk", True, where=c1)
    tau = slider("Temperature τ", 0.1, 5.0, "tau", 1.0, where=c2, step=0.1)
    raw = rec.raw_qk(head)
    bias = None if rec.bias is None else rec.bias[head]
    cf = counterfactual_softmax(raw, rec.scale, tau=tau, mask=mask, bias=bias, softcap=rec.softcap)
    shown = cf.scaled if use_scale else cf.unscaled
    left, right = st.columns([3, 2])
    with left:
        def name(lyr, h):
            return f"layer {lyr}, head {h}: softmax({'QKᵀ/√d_k' if use_scale else 'QKᵀ'} / τ={tau:g})"

        al, ah = anchor("cf", layer, head)  # after a press of the chart's own buttons: the head it was built on
        layers = switch_layers(len(sites), cap.n_heads, *shown.shape, al)
        if layers:  # every head of these layers under the same √d_k and τ: the chart's buttons switch them
            stack = np.full((len(sites), cap.n_heads) + shown.shape, np.nan, np.float32)  # [L, H, q, k]
            for lyr in layers:
                r, m = cap.records[sites[lyr]], cap.records[sites[lyr]].mask_for()
                c = counterfactual_softmax(r.raw_qk(), r.scale, tau=tau, mask=m, bias=r.bias, softcap=r.softcap)
                stack[lyr] = np.where(m, c.scaled if use_scale else c.unscaled, np.nan)
            chart(head_switcher(stack, qt, kt, al, ah, layers, zrange=(0, 1), present=present, name=name),
                  key="cf", width=column_px([3, 2], present)[0], name="counterfactual")
            link("cf")
        else:
            chart(matrix_heatmap(shown, qt, kt, mask=mask, zrange=(0, 1), present=present, title=name(layer, head)),
                  key="cf", width=column_px([3, 2], present)[0], name="counterfactual")
        switch_caption(layers, "it")
    with right:
        sweep = {"with 1/√d_k": [], "without": []}
        for t in TAUS:
            c = counterfactual_softmax(raw, rec.scale, tau=float(t), mask=mask, bias=bias, softcap=rec.softcap)
            valid = mask.any(-1)
            sweep["with 1/√d_k"].append(float(c.scaled_entropy[valid].mean()))
            sweep["without"].append(float(c.unscaled_entropy[valid].mean()))
        chart(lines(TAUS, sweep, title="Mean row entropy (nats) vs temperature", xlabel="τ (log)",
                    ylabel="entropy", present=present, log_x=True, vline=tau), key="sweep", width=column_px([3, 2], present)[1], name="entropy")
        live = mask.any(-1)
        m1, m2 = st.columns(2)
        m1.metric("rows > 0.9 with 1/√d_k", f"{(cf.scaled.max(-1)[live] > 0.9).mean():.0%}")
        m2.metric("rows > 0.9 without", f"{(cf.unscaled.max(-1)[live] > 0.9).mean():.0%}")
    sat, ent = zip(*((float((x.max(-1)[live] > 0.9).mean()), float(e[live].mean())) for x, e in
                     ((cf.scaled, cf.scaled_entropy), (cf.unscaled, cf.unscaled_entropy))))  # (with, without)
    st.caption(f"d_k = {d_k}: without the factor the scores are √d_k ≈ {np.sqrt(d_k):.1f}× larger. In layer {layer}, "
               f"head {head} that takes the rows with over 0.9 of their weight on one key from {sat[0]:.0%} to "
               f"{sat[1]:.0%} (mean row entropy {ent[0]:.2f} → {ent[1]:.2f} nats, τ = {tau:g}). A saturated row passes "
               "almost no gradient to its other keys, and the unscaled scores spread further as d_k grows. "
               "A large τ flattens the rows instead.")

    downloads(f"scores-L{layer}", csv=table,
              npz={"raw_qk": rec.raw_qk(), "scaled": rec.scores(), "mask": mask, "pattern_shown": shown,
                   **{f"step{i}": x for i, (_, x) in enumerate(rec.score_steps(head))},
                   "taus": TAUS, "entropy_scaled": np.array(sweep["with 1/√d_k"]),
                   "entropy_unscaled": np.array(sweep["without"])},
              json_obj={"model": inp.model, "text": inp.text, "layer": layer, "head": head, "tau": tau,
                        "sqrt_dk": bool(use_scale), "d_k": d_k, "table": pd.DataFrame(table).to_dict("list")})
