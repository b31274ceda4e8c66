"""Heads (/heads): what each head does (statistics and a label), and what happens when one is switched off."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.attention.qk_projection import qk_points, qk_table
from attnlab.analysis.probes.qk_attribution import FROZEN
from attnlab.app import state
from attnlab.app.downloads import downloads
from attnlab.app.figures.grids import grid_heatmap
from attnlab.app.figures.qk import qk_scatter, qk_terms, why_title
from attnlab.app.figures.style import head_names, md
from attnlab.app.frame import chart, guard, options, page, presenting
from attnlab.app.inputs import inputs, lacks
from attnlab.app.presets import default_query, presets
from attnlab.app.token_strip import predictions_table
from attnlab.app.url_state import index, select, toggle, token_select

STAT_HELP = {
    "entropy": "nats; low = focused", "max_weight": "largest weight, row mean", "mean_distance": "tokens back",
    "sink_mass": "weight on the first token", "diagonal_mass": "weight on itself", "prev_token": "weight on i−1",
    "duplicate_token": "to the earlier copy of itself (repeated sequence)",
    "induction": "to the token after the earlier copy (repeated sequence)",
}

SHORT = {"max_weight": "max weight", "mean_distance": "distance", "sink_mass": "sink", "diagonal_mass": "diagonal",
         "prev_token": "previous", "duplicate_token": "duplicate"}  # table headers; the help names the statistic
QK_INPUTS = 6  # inputs in the query–key view: the current text and the first sample texts
WHY_PAIRS = 12  # the largest terms whose parts make the "why does this head attend here?" matrix

with page("Heads", "What does each head do — and does the model need it?"):
    inp = inputs()
    cap = inp.capture()
    present = presenting()
    df, period = state.head_table(inp.model, inp.text, inp.src, inp.backend)
    stats = [c for c in STAT_HELP if c in df.columns]
    kv_groups = {site: rec.kv_group for site, rec in cap.records.items()}  # query heads per k/v head, per site
    shared = max(kv_groups.values(), default=1) > 1  # grouped-query attention: name each head's k/v head
    if shared:
        df = df.assign(kv_head=[h // kv_groups[site] for site, h in zip(df["site"], df["head"])])

    st.subheader("Head statistics")
    with options("Filter and sort"):
        labels = sorted(df["label"].unique())
        chosen = st.multiselect("Head types", labels, default=labels, key="labels")  # full width: every pill whole
        stacks = sorted(df["stack"].unique())
        c2, c3 = st.columns(2) if len(stacks) > 1 else (None, st.container())
        stack = select("Stack", ["all", *stacks], "stack", "all", where=c2, show=len(stacks) > 1)
        sort = select("Sort by", ["layer", *stats], "sort", "layer", where=c3)
    view = df[df["label"].isin(chosen)]
    if stack != "all":
        view = view[view["stack"] == stack]
    view = view.sort_values(sort if sort != "layer" else ["stack", "layer", "head"], ascending=sort in ("layer",
                                                                                                       "entropy"))
    cfg = {c: st.column_config.NumberColumn(SHORT.get(c, c), help=f"{c}: {STAT_HELP[c]}", format="%.3f")
           for c in stats}
    who = (["stack"] if len(stacks) > 1 else []) + ["layer", "head", *(["kv_head"] if shared else []), "label"]
    for part in (stats[:4], stats[4:]):  # two narrow tables, not one clipped wide one (whole at 1024 px)
        st.dataframe(view, hide_index=True, column_config=cfg, column_order=[*who, *part],
                     height=min(640, 40 + 35 * max(1, len(view))))
    st.caption(f"Duplicate-token and induction scores come from a random sequence repeated with period {period} "
               "(as TransformerLens' head detectors). Labels: first rule that fits — induction, duplicate-token, "
               "previous-token, broad/uniform, sink, self/diagonal — else mixed. Click a column header to sort."
               + (" Grouped-query attention: kv_head is the key/value head a query head shares; the maps below draw "
                  "a line between each group of heads sharing one." if shared else ""))

    stat = select("Map of", stats, "stat", "induction" if "induction" in stats else stats[0], horizontal=True)
    for s in sorted(df["stack"].unique()):
        part = df[df["stack"] == s]
        grid = part.pivot(index="layer", columns="head", values=stat).to_numpy()  # [layers, heads]
        group = kv_groups[part["site"].iloc[0]]
        chart(grid_heatmap(grid, [f"{s} layer {i}" for i in range(grid.shape[0])], head_names(grid.shape[1], group),
                           diverging=False, value_name=stat, present=present, title=f"{stat} — {s}", kv_group=group),
              key=f"grid-{s}", name=f"{stat}-{s}")

    st.subheader("Switch a head off")
    if lacks(inp.model, "interventions", "section switches heads off inside the model"):
        pass
    elif not state.model_info(inp.model)["has_logits"]:
        st.info(f"{inp.model} has no prediction head, so there is no prediction to change. Pick a lecture model.")
    else:
        sites = list(cap.records)
        tokens = cap.tokens
        c1, c2, c3 = st.columns(3)
        site = select("Attention site", sites, "site", sites[-1] if len(sites) else None, where=c1)
        head = index("Head", cap.n_heads, "head", 0, where=c2)
        q = token_select("Prediction at token", tokens, "query", default_query(cap, inp.preset), where=c3)
        answer_id = state.token_id(inp.model, inp.preset.answer) if inp.preset and inp.preset.answer else None
        before, after = state.ablate(inp.model, inp.text, inp.src, site, head, q, answer_id, inp.backend)
        c1, c2 = st.columns(2)
        with c1:
            st.markdown("**All heads**")
            predictions_table(before.tokens, before.probs)
        with c2:
            st.markdown(f"**{site}, head {head} zeroed**")
            if kv_groups[site] > 1:
                g = kv_groups[site]
                st.caption(f"Head {head} shares k/v head {head // g} with heads {head // g * g}–{head // g * g + g - 1}; "
                           "zeroing its output leaves the shared keys and values as they are.")
            predictions_table(after.tokens, after.probs)
        delta = after.target_prob - before.target_prob
        st.metric(f"p(“{before.target}”)", f"{after.target_prob:.3f}", f"{delta:+.3f}", delta_color="normal")
        st.caption("Zeroing a head sets its output z to 0 before the output projection (model.hooks.zero_head on "
                   "hook_z); the rest of the model runs unchanged.")

        n_runs = len(sites) * cap.n_heads
        sweep = toggle(f"Ablate every head in turn ({n_runs} forward passes)", "sweep", n_runs <= 64)
        if sweep:
            names, grid, base = state.ablation_sweep(inp.model, inp.text, inp.src, q, answer_id, inp.backend)
            group = kv_groups[sites[-1]]
            chart(grid_heatmap(grid, names, head_names(grid.shape[1], group), kv_group=group,
                               value_name="Δp", present=present, fmt="+.3f",
                               title=f"Change in p(“{base.target}”) when one head is zeroed"),
                  key="sweep-grid", name="ablation")
            worst = np.unravel_index(np.argmin(grid), grid.shape)
            st.caption(f"Most needed: {names[worst[0]]}, head {worst[1]} (Δp = {grid[worst]:+.3f}).")

    st.subheader("Queries and keys of one head")
    if not lacks(inp.model, "has_qk", "view plots each head's q and k vectors"):
        batch = [("your text" if inp.preset is None else inp.preset.title, inp.text, inp.src)]
        for p in presets(inp.model):
            if len(batch) < QK_INPUTS and p.text != inp.text:
                batch.append((p.title, p.text, (p.src_text or inp.src) if inp.src is not None else None))
        c1, c2, c3 = st.columns(3)
        qk_sites = list(cap.records)
        qk_site = select("Attention site", qk_sites, "qk_site", qk_sites[-1], where=c1)
        qk_head = index("Head", cap.n_heads, "qk_head", 0, where=c2)
        aligned = toggle("Align keys to queries", "qk_align", True, where=c3,
                         help="AttentionViz: shift every key by one vector and rescale q and k so the two clouds overlap; "
                              "every softmax row stays the same.")
        runs = [state.capture(inp.model, t, s, inp.backend) for _, t, s in batch]
        points = qk_points(runs, qk_site, qk_head, [name for name, _, _ in batch], normalise=aligned)
        chart(qk_scatter(points, present=present, title=f"{qk_site}, head {qk_head}: queries and keys of "
                                                        f"{len(batch)} inputs (PCA)"), key="qk", name="qk-view")
        st.caption("Each dot is one token of one input (repeated tokens are separate dots): its query or key vector "
                   "for this head — after positions, RoPE and QK-norm, exactly what is dotted — projected with the "
                   "principal components of all of them together. A query lies near the keys it scores highly when "
                   "keys are aligned. Inputs: the current text and the model's sample texts."
                   + (f" Under grouped-query attention the keys are k/v head {qk_head // kv_groups[qk_site]}'s, "
                      f"shared by {kv_groups[qk_site]} query heads." if kv_groups[qk_site] > 1 else ""))
        downloads("heads-qk", csv=pd.DataFrame(qk_table(points)))

    st.subheader("Why does this head attend here?")
    if lacks(inp.model, "has_qk", "view splits a head's scores into the parts of the residual stream"):
        pass
    elif (why_not := state.qk_refusal(inp.model)) is not None:
        st.caption(f"{why_not}.")
    else:
        with guard():
            c1, c2, c3, c4 = st.columns(4)
            why_site = select("Attention site", list(cap.records), "why_site", list(cap.records)[-1], where=c1)
            why_head = index("Head", cap.n_heads, "why_head", 0, where=c2)
            toks = cap.tokens
            why_q = token_select("Query", toks, "why_query", default_query(cap, inp.preset), where=c3)
            top = int(np.argmax(cap.records[why_site].pattern(why_head)[why_q]))
            pick = select("Key", ["top", *range(len(toks))], "why_key", "top", where=c4,
                          format_func=lambda i: f"most attended: {top} · {toks[top]}" if i == "top" else f"{i} · {toks[i]}")
            why_k = top if pick == "top" else pick
            a = state.qk_attribution(inp.model, inp.text, inp.src, cap.records[why_site].layer, why_head, why_q, why_k)
            qs, ks, m = a.top_matrix(WHY_PAIRS)
            shown = float(m.sum())
            chart(qk_terms(qs, ks, m, present=present, title=why_title(a)), key="why-terms", name="qk-attribution")
            cap_note = (f" The model soft-caps it: cap·tanh(score/cap) = {a.capped_score:.3f} is what the softmax reads."
                        if a.capped_score is not None else "")
            st.caption(f"Each cell is one term scale·q·k of the score of query {md(toks[why_q])} against key "
                       f"{md(toks[why_k])}: the row's part of the query's residual stream through W_Q, the column's "
                       f"part of the key's through W_K. The matrix holds the parts of the {WHY_PAIRS} largest terms "
                       f"(their cells sum to {shown:.3f}); all {len(a.terms())} terms sum to {a.total:.4f}, the score "
                       f"{a.score:.4f} (residual {a.residual:.1e}).{cap_note} Frozen scale: {FROZEN}."
                       + (" The key is masked for this query: its score never reaches the softmax." if a.masked else ""))
            downloads("heads-qk-attribution", json_obj=a.to_json())

    downloads("heads", csv=df, json_obj={"model": inp.model, "text": inp.text, "period": period,
                                         "heads": df.to_dict("records")})
