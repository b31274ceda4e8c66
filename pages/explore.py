"""Explore (/): pick a model and a text, see its tokens, its prediction and where the query token looks. The
token strip is shaded by the layer and head the preset's note points at (e.g. "head 2.1"), else the last layer's
head mean; both can be changed."""

import streamlit as st
from attnlab.analysis.attention.rollout import fuse_heads
from attnlab.app import state
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.rows import method_rows
from attnlab.app.figures.style import esc, head_names
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import inputs
from attnlab.app.presets import default_query, note_head, source_index
from attnlab.app.story_view import story_side_by_side
from attnlab.app.token_strip import predictions_table, token_strip, unknown_note, unknown_positions
from attnlab.app.url_state import index, select, token_select

with page("Explore", "What does the model see, and where does its attention go?"):
    inp = inputs()  # in the sidebar, as on every page
    info = state.model_info(inp.model)
    st.subheader(f"{info['name']}")
    layers = info["layers"]
    st.markdown(
        f"**{info['kind']}** · {layers if not isinstance(layers, list) else ' + '.join(map(str, layers))} layers · "
        f"{info['heads']} heads · d_model {info['d_model']} · context {info['context']} tokens · "
        f"{info['positional']} positions · {info['norm']}-norm · *{info['source']}*")
    readme = state.model_card(inp.model)
    if readme:
        with st.expander("Model card"):
            st.markdown(readme)
    if inp.model.startswith("random-"):
        st.info("Random weights show no structure. Pick a bundled lecture model to see trained attention.")

    cap = inp.capture()
    q = default_query(cap, inp.preset)
    src = source_index(cap, inp.preset)
    if inp.preset is not None:
        st.markdown(f"#### What to look at — {inp.preset.title}")
        st.markdown(inp.preset.note)
        if inp.preset.answer:
            st.caption(f"Answer: **{inp.preset.answer}** · query token {inp.preset.query_index}"
                       + (f" · its source, token {inp.preset.source_index}" if inp.preset.source_index is not None
                          else ""))
    story_side_by_side(inp.model, inp.preset)

    groups = cap.groups()
    group = "cross" if "cross" in groups else next(iter(groups))
    qt, kt = cap.group_tokens(group)
    stack = cap.matrices(group)  # [L, H, q, k]
    q = min(q, len(qt) - 1)
    q = token_select("Query token", qt, "query", q, help="The row whose attention is shown below.")
    per_layer = fuse_heads(stack[:, :, q : q + 1, :], "mean")[:, 0]  # [L, k]: head-mean row of each layer

    n_layers, n_heads = stack.shape[:2]
    names = head_names(n_heads, cap.layer_records(group)[0].kv_group)  # "head h · kv g" under grouped-query attention
    named = note_head(inp.preset)
    named = named if named and named[0] < n_layers and named[1] < n_heads else None
    c1, c2 = st.columns(2)
    s_layer = index("Strip layer", n_layers, "strip_layer", named[0] if named else n_layers - 1, where=c1)
    s_head = select("Strip heads", ["mean", *range(n_heads)], "strip_head", named[1] if named else "mean",
                    where=c2, format_func=lambda h: "mean over heads" if h == "mean" else names[h])
    strip_row = per_layer[s_layer] if s_head == "mean" else stack[s_layer, s_head, q]  # [k]
    which = f"layer {s_layer}, " + ("head mean" if s_head == "mean" else f"head {s_head}")
    which += " (the head the note names)" if named == (s_layer, s_head) else ""
    vocab = state.vocabulary(inp.model)
    unknown, src_unknown = unknown_positions(cap.ids, vocab), unknown_positions(cap.src_ids, vocab)
    unknown_note(vocab, unknown, len(cap.tokens), tokens=cap.tokens)
    unknown_note(vocab, src_unknown, len(cap.src_tokens or []), what="source text", tokens=cap.src_tokens or [])
    st.markdown(f"#### Tokens ({len(cap.tokens)})" + (" — target" if cap.src_tokens else ""))
    token_strip(qt, strip_row if group != "cross" else None, query=q,
                source=src if group != "cross" else None, unknown=unknown,
                label=f"shaded by {which}: attention from the outlined query token" if group != "cross" else None)
    if cap.src_tokens:
        st.markdown(f"#### Source tokens ({len(cap.src_tokens)})")
        token_strip(cap.src_tokens, strip_row, unknown=src_unknown,
                    label=f"shaded by {which}: cross-attention from the outlined target token")

    fig = method_rows({f"layer {i}": per_layer[i] for i in range(len(per_layer))}, kt,
                      title=f"Where does token {q} ({esc(qt[q])}) look? Head mean per layer",
                      present=presenting(), source=src if group != "cross" else None,
                      exclude=q if group != "cross" else None)
    chart(fig, key="explore-rows", name="explore")
    st.caption("Each row is one layer: the attention weights of the query token, averaged over heads and scaled "
               "to the row's largest weight on another token. A red dotted box marks the preset's ground-truth source token.")

    if cap.top_tokens is not None:
        st.markdown(f"#### The model's prediction at token {q}")
        predictions_table(cap.top_tokens[q], cap.top_probs[q])
    st.caption(f"Backend {cap.backend}: kernels {', '.join(cap.kernels)}.")
    downloads("explore", csv=matrix_csv(per_layer, [f"layer {i}" for i in range(len(per_layer))], kt),
              npz={f"{s}/pattern": cap.records[s].pattern() for s in cap.records} | {"tokens": cap.tokens},
              json_obj={"model": inp.model, "text": inp.text, "src_text": inp.src, "tokens": cap.tokens,
                        "src_tokens": cap.src_tokens, "ids": cap.ids, "query": q,
                        "top_tokens": cap.top_tokens[q] if cap.top_tokens else None,
                        "top_probs": cap.top_probs[q] if cap.top_probs is not None else None})
