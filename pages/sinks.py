"""Attention sinks (/sinks): each head's share of attention on the first token over a set of texts, the sink heads,
the first token's key, value, output and residual norms against the others', and StreamingLLM's window test."""

import streamlit as st
from attnlab.analysis.machinery.window_ppl import SINKS, window_test_lacks
from attnlab.analysis.probes.sinks import SINK_SHARE
from attnlab.app import state
from attnlab.app.downloads import downloads
from attnlab.app.figures.sinks import NORM_NAMES, norm_lines, ppl_bars, share_grid
from attnlab.app.frame import chart, guard, page, presenting
from attnlab.app.url_state import select, toggle
from attnlab.model.gguf.smollm2 import NAME as SMOL
from attnlab.model.registry import model_choices

with page("Attention sinks", "Why does almost every token attend to the first one?", icon=":material/anchor:"):
    present = presenting()
    choices = model_choices()
    default = next((m for m in (SMOL, "lecture-decoder") if m in choices), choices[0])
    name = select("Model", choices, "sinks_model", default, where=st.sidebar,
                  help="This page's own model (smollm2 when installed): the other pages keep the session's.")
    info = state.model_info(name)
    st.markdown(
        "A softmax row must sum to 1, so a head with nothing useful to read still has to put its weight somewhere. "
        "Trained models learn to park it on the **first token**, which every later token can see: a *sink*. The sink "
        "token's value is small, so parking there changes the output little. StreamingLLM (Xiao et al., 2024) "
        f"showed the practical side: a sliding window that drops the first tokens loses the sink and the "
        f"perplexity jumps; keeping just the first {SINKS} tokens in the window brings it back.")
    report = state.sink_report(name)
    L, H = report.share.shape
    chart(share_grid(report.share, SINK_SHARE, present=present,
                     title=f"{name}: each head's mean weight on the first token ({report.n_texts} texts)"),
          key="sinks-grid", name="sinks-share")
    n = len(report.sink_heads)
    worst = int(report.per_layer.argmax())
    st.markdown(
        f"Each cell: the weight a head puts on token 0, averaged over every query row after the first (row 0 can see "
        f"only token 0) and over {report.n_texts} texts ({report.tokens:,} tokens). Ringed: **{n} of {L * H}** heads "
        f"put ≥ {SINK_SHARE} there (sink heads). Layer {worst} leans on it most: "
        f"{report.per_layer[worst]:.2f} on average, {100 * report.sink_rate[worst]:.0f}% of its heads are sinks.")
    if report.norms is not None:
        st.subheader("What the sink token carries")
        which = select("Norm", list(NORM_NAMES), "sinks_norm", "out", horizontal=True, format_func=NORM_NAMES.get)
        chart(norm_lines(report.norms, which, present=present,
                         title=f"{NORM_NAMES[which]} per layer: the first token against the others"),
              key="sinks-norms", name=f"sinks-{which}")
        st.caption("‖k‖, ‖v‖: per key/value head. ‖α·v‖: what the first token adds to a head's output (its weight × "
                   "its value), against what all the other tokens add together. ‖x‖: the residual stream after the "
                   "layer at that position; a first token far above the rest is the 'massive activation' pattern.")
    elif report.note:
        st.caption(report.note + ".")
    st.subheader("The window test (StreamingLLM)")
    lacks = window_test_lacks(state.model(name))
    ppl = None
    if lacks:
        st.caption(f"No window test: {lacks}.")
    elif toggle("Run the window test", "sinks_window", False,
                help="Four passes over the long text (SmolLM2: 2,204 tokens, about a minute on a free CPU)."):
        with guard():
            ppl = state.window_test(name, None).to_json()
            chart(ppl_bars(ppl, present=present, title=f"perplexity over {ppl['tokens']:,} tokens, window of "
                                                        f"{ppl['window']} keys"), key="sinks-ppl", name="sinks-window")
            st.markdown(
                f"Every query sees the last **{ppl['window']}** keys; *window + sinks* also sees the first "
                f"{ppl['sinks']} tokens. Against full attention the perplexity is {ppl['with_sinks'] / ppl['full']:.2f}× "
                f"with the sinks and {ppl['without_sinks'] / ppl['full']:.2f}× without: dropping them costs "
                f"{ppl['without_sinks'] / ppl['with_sinks']:.2f}×. Every "
                "token stays at its own position; *cache positions* moves the sinks next to the window, as "
                "StreamingLLM's cache does (RoPE models).")
    downloads("sinks", json_obj=report.to_json() | {"window_ppl": ppl})
