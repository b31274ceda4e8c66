"""Cross-attention (/cross-attention): in the encoder–decoder, which source tokens each target token reads — per
layer and head, next to the decoder's own causal self-attention — and a replay of generation, one target token
at a time."""

import streamlit as st
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px, wrapping_columns
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.matrix import mark_cells, matrix_heatmap
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.figures.rows import generation_matrix, head_rows
from attnlab.app.figures.style import cell_px, md, title_lines_px, wrap
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import lacks, require
from attnlab.app.token_strip import token_strip, unknown_note, unknown_positions
from attnlab.app.url_state import select, slider

HEADS_MEAN = -1


def head_name(h: int) -> str:
    return "mean of heads" if h == HEADS_MEAN else f"head {h}"


with page("Cross-attention", "Which source words does each target word read?", icon="⇄"):
    inp = require(("reads_source",), "shows an encoder–decoder's cross-attention", ("encdec",))
    present = presenting()
    cap = inp.capture()
    cross, dec = cap.matrices("cross"), cap.matrices("decoder")  # [L, H, T, S], [L, H, T, T]
    n_layers, n_heads = cross.shape[:2]
    src_t, tgt_t = cap.src_tokens, cap.tokens
    align = [tuple(p) for p in inp.preset.alignment] if inp.preset else []  # (target, source) pairs

    st.markdown("The **encoder** reads the source sentence with bidirectional self-attention. The **decoder** writes "
                "the target: its self-attention is causal (each target token sees the ones before it), and its "
                "**cross-attention** takes queries from the target and keys and values from the encoder's output — "
                "that is where a translation looks up the source words.")
    vocab = state.vocabulary(inp.model)
    unk_src, unk_tgt = unknown_positions(cap.src_ids, vocab), unknown_positions(cap.ids, vocab)
    unknown_note(vocab, unk_src, len(src_t), "source text", src_t)
    unknown_note(vocab, unk_tgt, len(tgt_t), "target text", tgt_t)
    token_strip(src_t, label=f"source ({len(src_t)} tokens, encoder input)", unknown=unk_src)
    token_strip(tgt_t, label=f"target ({len(tgt_t)} tokens, decoder input)", unknown=unk_tgt)

    st.subheader("Every layer and head of cross-attention")
    chart(mosaic(cross, tgt_t, src_t, kind="pattern", present=present,
                 title=wrap("cross-attention: target tokens (rows) × source tokens (columns)", 500, present),
                 layer_labels=[f"layer {i}" for i in range(n_layers)]), key="x-mosaic", name="cross-mosaic")

    st.subheader("One layer up close: cross-attention next to the decoder's self-attention")
    c1, c2 = st.columns(2)
    layer = slider("Layer", 0, n_layers - 1, "x_layer", n_layers - 1, where=c1)
    head = select("Head", [HEADS_MEAN, *range(n_heads)], "x_head", HEADS_MEAN, where=c2, format_func=head_name)

    def pick(stack):
        return stack[layer].mean(0) if head == HEADS_MEAN else stack[layer, head]  # [q, k]: the head mean or one head

    cell = cell_px(present)
    side = max(400, cell * max(len(src_t), len(tgt_t)) + 190)  # px: each chart's narrowest width, labels whole
    a, b = wrapping_columns(2, "x-pair", side)
    with a:
        title = wrap(f"cross-attention, layer {layer}, {head_name(head)}", side - 20, present)
        fig = matrix_heatmap(pick(cross), tgt_t, src_t, present=present, title=title,
                             height=max(360, cell * len(tgt_t) + 200 + title_lines_px(title, present)))
        fig.update_xaxes(title="source token (key)")
        fig.update_yaxes(title="target token (query)")
        # the row that WRITES target token t is row t − 1 (the decoder at position t − 1 predicts token t)
        chart(mark_cells(fig, [(t - 1, s) for t, s in align if 1 <= t <= len(tgt_t) and s < len(src_t)]),
              key="x-cross", width=column_px(2, present, min_width=side)[0], name="cross")
        if align:
            st.caption("Circles: the reference word alignment of this lecture sample, drawn on the row that writes "
                       "each target word — the row of the token before it, since position t predicts token t + 1.")
    with b:
        title = wrap(f"decoder self-attention, layer {layer}, {head_name(head)}", side - 20, present)
        fig = matrix_heatmap(pick(dec), tgt_t, tgt_t, mask=cap.mask_of("decoder"), present=present, title=title,
                             height=max(360, cell * len(tgt_t) + 200 + title_lines_px(title, present)))
        fig.update_xaxes(title="target token (key)")
        fig.update_yaxes(title="target token (query)")
        chart(fig, key="x-self", width=column_px(2, present, min_width=side)[0], name="decoder-self")
        st.caption("Causal: grey cells above the diagonal are masked, each target token sees only earlier ones.")

    # -- generation replay ----------------------------------------------------------------------------------
    st.subheader("Replay: writing the target one token at a time")
    tr = site = None
    if not lacks(inp.model, "generates", "replay generates with our KV cache"):
        c1, c2, c3 = st.columns(3)
        n_new = slider("Tokens to generate", 1, 40, "x_n", 16, where=c1)
        start = select("Start from", ["source", "prefix"], "x_start", "source", where=c2,
                       format_func={"source": "the source only (an empty target)",
                                    "prefix": "the target text above as a prefix"}.get)
        prompt = "" if start == "source" else inp.text
        tr = mechanics.generation_trace(inp.model, prompt, inp.src, n_new, 0.0, None, None, inp.backend)
        step = slider("Step", 0, tr.n_steps - 1, "x_step", 0, where=c3, help="Which generated token to look at.")
        cross_sites = [s for s in tr.sites if tr.kinds[s] == "cross"]
        site = cross_sites[min(layer, len(cross_sites) - 1)]
        new_tok = tr.tokens[tr.prompt_len + step]
        q = tr.query_position(step)
        st.markdown(f"Step **{step}**: the decoder reads position {q} ({md(tr.tokens[q])}) and writes "
                    f"**{md(new_tok)}** (p = {tr.chosen_prob[step]:.3f}). Greedy decoding, layer {layer}.")
        token_strip(tr.tokens[: tr.prompt_len + step + 1], query=q,
                    label="target so far (the query token outlined; the last token is the one just written)")
        row = tr.rows[site][step]  # [H, S]; row.mean(0) [S] shades the source below
        token_strip(tr.src_tokens, row.mean(0), label=f"source, shaded by layer {layer}'s cross-attention from the "
                    "query token (mean of heads)")
        side = max(400, cell * len(tr.src_tokens) + 190)
        a, b = wrapping_columns(2, "x-replay-pair", side)
        with a:
            chart(head_rows(row, tr.src_tokens, present=present,
                            title=wrap(f"step {step}: cross-attention of each head over the source", side - 20,
                                       present)),
                  key="x-step", width=column_px(2, present, min_width=side)[0], name="replay-step")
        with b:
            chart(generation_matrix(tr.step_matrix(site, None if head == HEADS_MEAN else head), tr.tokens,
                                    tr.prompt_len, k_tokens=tr.src_tokens, present=present, current=step,
                                    title=wrap(f"all steps: source tokens read while writing (layer {layer}, "
                                               f"{head_name(head)})", side - 20, present)),
                  key="x-replay", width=column_px(2, present, min_width=side)[0], name="replay")
        if inp.preset is not None and inp.preset.src_text and start == "source":
            st.caption(f"Reference translation of this sample: “{inp.preset.text}”. Generated: "
                       f"“{' '.join(tr.new_tokens)}”.")

    downloads("cross-attention", csv=matrix_csv(pick(cross), tgt_t, src_t),
              npz={"cross": cross, "decoder_self": dec, "src_tokens": src_t, "tgt_tokens": tgt_t,
                   **({"replay_cross": tr.rows[site]} if tr else {})},
              json_obj={"model": inp.model, "src_text": inp.src, "text": inp.text, "layer": layer, "head": head,
                        "src_tokens": src_t, "tgt_tokens": tgt_t, "alignment": align,
                        "generated": tr.new_tokens if tr else None, "replay_probs": tr.chosen_prob if tr else None})
