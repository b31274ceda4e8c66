"""KV cache (/kv-cache): generation with and without the cache agrees step by step; rows stitched from cached
steps equal the full matrix; and why caching is exact — earlier tokens never change when new ones arrive."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.machinery.checks import TOL_CACHE
from attnlab.analysis.machinery.kv_cache import cache_costs
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px, wrapping_columns
from attnlab.app.downloads import downloads
from attnlab.app.figures.bars import step_deltas
from attnlab.app.figures.lines import cache_cost, tiny_lines
from attnlab.app.figures.matrix import chunk_lines, matrix_heatmap
from attnlab.app.figures.style import cell_px, wrap
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.inputs import require
from attnlab.app.token_strip import token_strip, unknown_note, unknown_positions
from attnlab.app.url_state import select, slider
from attnlab.app.verdicts import scale_note, verdict_banner, verdict_table

GROUPS = {"self": "self-attention", "cross": "cross-attention (target → source)"}

with page("KV cache", "Why may a decoder keep the keys and values of earlier tokens — and does the cache change "
                      "anything?", icon="♻"):
    inp = require(("has_cache",), "needs a model that generates (a decoder or an encoder–decoder)",
                  ("decoder", "encdec"))
    present = presenting()
    info = state.model_info(inp.model)
    with options():
        c1, c2 = st.columns(2)
        n_new = slider("New tokens to generate", 1, 32, "kv_n", 12, where=c1,
                       help="Greedy generation, once with the cache and once recomputing everything each step.")
        c2.markdown(f"Backend **{inp.backend}** (sidebar). `attnlab check` itself uses sdpa for the cache checks.")

    # -- 1. the verdict (= attnlab check) --------------------------------------------------------------------
    st.subheader("Verdict — the same numbers `attnlab check` prints for this input")
    kv = mechanics.kv_cache_check(inp.model, inp.text, inp.src)  # one run: this verdict and the stitched rows below
    rows = kv.rows + mechanics.greedy_cache_check(inp.model, inp.text, inp.src).rows
    verdict_table(rows)
    scale_note(rows, mechanics.output_scale(inp.model, inp.text, inp.src))
    verdict_banner(all(r["passed"] for r in rows),
                   "With the cache, every attention row equals full recomputation within "
                   f"{TOL_CACHE:g}, the logits within {TOL_CACHE:g}·max(1, max|logits|), and greedy generation "
                   "picks the same tokens.",
                   "The cache changed the result beyond the tolerance — see the steps below.")
    st.caption("The check runs the text in cached chunks (half the text as a prefill, a 2-token chunk, then one "
               "token at a time) against one uncached pass, and generates 20 greedy tokens both ways.")

    # -- 2. generation step by step ------------------------------------------------------------------------
    st.subheader(f"Generating {n_new} tokens: with the cache vs recomputing everything")
    gen = mechanics.cache_generation(inp.model, inp.text, inp.src, n_new, inp.backend)
    steps = pd.DataFrame(gen["steps"])
    if len(steps) < n_new and gen["prompt_len"] + len(steps) >= info["context"]:
        st.info(f"Stopped after {len(steps)} of {n_new}: the model's context is {info['context']} tokens and the "
                f"prompt has {gen['prompt_len']}. Shorten the text to generate more.", icon=":material/block:")
    verdict_banner(gen["passed"], f"All {len(steps)} steps: max |Δlogits| ≤ {gen['tolerance']:g} and the same "
                                  f"token each time (worst {gen['max_abs_logits']:.2e}).",
                   f"Some steps differ (worst max |Δlogits| {gen['max_abs_logits']:.2e}).")
    left, right = wrapping_columns(2, "kv-steps-pair", 440)  # one under the other when narrow: the steps' labels
    with left:
        chart(step_deltas(steps["max_abs_logits"], steps["cached_token"], gen["tolerance"], passed=steps["passed"],
                          title=wrap("max |Δ next-token logits| per step (cached − uncached)", 300, present),
                          present=present),
              key="kv-steps", width=column_px(2, present, min_width=440)[0], name="kv-steps")
    with right:
        st.dataframe(steps[["step", "position", "cached_token", "uncached_token", "max_abs_logits", "passed"]],
                     hide_index=True, height=340, column_config={
                         "cached_token": "token (cached)", "uncached_token": "token (no cache)",
                         "max_abs_logits": st.column_config.NumberColumn("max |Δlogits|", format="%.2e"),
                         "passed": st.column_config.CheckboxColumn("≤ tol, same token")})
    cap = state.capture(inp.model, inp.text, inp.src, "eager")
    vocab = state.vocabulary(inp.model)
    unknown = unknown_positions(cap.ids, vocab)
    unknown_note(vocab, unknown, len(cap.tokens), "prompt", cap.tokens)
    token_strip(list(cap.tokens) + gen["cached"], query=len(cap.tokens) - 1, unknown=unknown,
                label=f"the prompt (its last token outlined) and the {len(gen['cached'])} tokens generated with "
                      "the cache")

    # -- 3. stitched rows vs the full matrix ----------------------------------------------------------------
    st.subheader("Attention rows from the cached steps next to the full matrix")
    sti = kv.detail
    sites = list(sti["sites"])
    kinds = sorted({v["kind"] for v in sti["sites"].values()}, key=["self", "cross"].index)
    c1, c2, c3 = st.columns(3)
    group = select("Attention", kinds, "kv_group", "self", where=c1, format_func=GROUPS.get, show=len(kinds) > 1)
    layered = [s for s in sites if sti["sites"][s]["kind"] == group]
    layer = slider("Layer", 0, len(layered) - 1, "kv_layer", len(layered) - 1, where=c2)
    site = layered[layer]
    n_heads = sti["sites"][site]["full"].shape[0]
    head = slider("Head", 0, n_heads - 1, "kv_head", 0, where=c3)
    qt = cap.tokens
    kt = cap.src_tokens if group == "cross" else cap.tokens
    stitched, full = sti["sites"][site]["stitched"][head], sti["sites"][site]["full"][head]
    mask = None if group == "cross" else cap.mask_of(cap.target_group)
    diff = stitched - full
    # every query row labelled (a row a label's height), keys every few columns: three charts the same size
    side = dict(height=max(560, cell_px(present) * len(qt) + 200), max_ticks=10 if present else 16, every_row=True,
                square=False,
                present=present)
    a, b, c = wrapping_columns(3, "kv-triple", 440)  # three a row when each gets 440 px, else two or one
    with a:
        fig = matrix_heatmap(stitched, qt, kt, mask=mask, title="stitched from the cached steps",
                             zrange=(0.0, 1.0), **side)
        chart(chunk_lines(fig, sti["bounds"], len(kt)), key="kv-stitched", width=column_px(3, present, min_width=440)[0], name="kv-stitched")
    with b:
        chart(matrix_heatmap(full, qt, kt, mask=mask, title="one uncached pass", zrange=(0.0, 1.0), **side),
              key="kv-full", width=column_px(3, present, min_width=440)[0], name="kv-full")
    with c:
        lim = max(float(np.abs(diff).max()), TOL_CACHE)
        chart(matrix_heatmap(diff, qt, kt, mask=mask, kind="diff", zrange=(-lim, lim), value_name="Δ",
                             title=f"difference (max |Δ| {np.abs(diff).max():.1e})", **side),
              key="kv-diff", width=column_px(3, present, min_width=440)[0], name="kv-diff")
    (p0, p1), rest = sti["bounds"][0], sti["bounds"][1:]
    st.caption(f"{site}, head {head}. The text is fed as the cache would see it: a prefill of rows {p0}–{p1 - 1}, "
               + (f"a 2-token chunk (rows {rest[0][0]}–{rest[0][1] - 1}; its mask is the bottom-right corner of the "
                  "causal mask), " if rest and rest[0][1] - rest[0][0] == 2 else "")
               + "then one row per step. Each step's queries see the keys cached so far plus their own. The colour "
               f"scale of the difference is ±{lim:.0e}: white means equal.")

    # -- 4. why it works -----------------------------------------------------------------------------------
    st.subheader("Why a cache is possible: earlier tokens never change")
    ps = mechanics.prefix_stability(inp.model, inp.text, inp.src, inp.backend)  # the first PREFIX_TOKENS tokens
    left, right = wrapping_columns(2, "kv-prefix-pair", 440)
    with left:
        chart(tiny_lines(ps["lengths"], {"attention rows of earlier tokens": ps["rows"],
                                         "their keys": ps["keys"], "their values": ps["values"]},
                         TOL_CACHE, xlabel="tokens fed so far (t)", ylabel="max |Δ| vs the whole text (log)",
                         title=wrap("Feed the text one more token at a time", 440, present), present=present),
              key="kv-prefix", width=column_px(2, present, min_width=440)[0], name="kv-prefix")
    with right:
        st.markdown(
            "Run the model on the first *t* tokens, for every *t*, and compare what it computes for those tokens "
            "with the run on the whole text. With a **causal mask** a token only sees itself and earlier tokens, "
            "so its keys, values and attention row cannot depend on anything that comes later: the differences "
            f"stay at float rounding (worst {max(ps['rows'].max(), ps['keys'].max(), ps['values'].max()):.1e}), "
            "far below the tolerance. That is why the keys and values of earlier tokens can be stored and reused: "
            "each new token then needs one new row of attention, O(T), instead of recomputing the whole "
            "T×T matrix, O(T²).")
        if ps["truncated"]:
            st.caption(f"(the first {ps['T']} tokens of the text)")
    n_sites = len([s for s in sites if sti["sites"][s]["kind"] == "self"])
    cost = cache_costs(len(cap.tokens), len(gen["steps"]), n_sites, n_heads)
    # the page's narrowest width (1024 px): about 650 px of chart, 530 in presentation mode's larger type
    chart(cache_cost(cost["steps"], cost["cached"], cost["uncached"], present=present,
                     title=wrap(f"Work of self-attention over {len(gen['steps'])} generation steps "
                                f"({info['heads']} heads, {n_sites} layers)", 500 if present else 620, present)),
      key="kv-cost", name="kv-cost")

    downloads("kv-cache", csv=steps,
              npz={"stitched": sti["sites"][site]["stitched"], "full": sti["sites"][site]["full"],
                   "bounds": np.array(sti["bounds"]), "prefix_lengths": ps["lengths"], "prefix_rows": ps["rows"],
                   "prefix_keys": ps["keys"], "prefix_values": ps["values"]},
              json_obj={"model": inp.model, "text": inp.text, "src_text": inp.src, "backend": inp.backend,
                        "check": rows, "generation": gen})
