"""Rollout & attribution (/rollout): which input tokens matter for one output token, by nine methods."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.attention.flow import MAX_TOKENS as FLOW_MAX
from attnlab.analysis.attention.rollout import attention_rollout, cross_rollout, fuse_heads
from attnlab.analysis.faithfulness.why import explain
from attnlab.analysis.probes.attributions import METHODS as GRADIENT_METHODS
from attnlab.analysis.probes.attributions import ig_refusal
from attnlab.analysis.probes.context_mixing import METHODS as MIXING
from attnlab.analysis.probes.context_mixing import refusal as mixing_refusal
from attnlab.analysis.probes.embed_path import has_embed_hook
from attnlab.app import state
from attnlab.app.downloads import downloads
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.rows import method_rows
from attnlab.app.figures.style import baseline_md, esc
from attnlab.app.frame import chart, guard, options, page, presenting
from attnlab.app.held_out import ask as ask_for_ig
from attnlab.app.held_out import held_out
from attnlab.app.held_out import table as held_out_table
from attnlab.app.inputs import inputs, lacks
from attnlab.app.mixing_view import mixing_layers
from attnlab.app.presets import default_query, source_index
from attnlab.app.token_strip import token_strip, unknown_note, unknown_positions
from attnlab.app.url_state import select, slider, token_select

ASSUMES = {
    "attention": "Raw attention of the last layer, head mean: assumes the last layer alone decides and that a "
                 "weight means importance. It ignores every layer below and the residual stream.",
    "rollout": "Attention rollout (Abnar & Zuidema 2020): multiplies the layers' head-fused attention, each mixed "
               "with the identity for the residual stream. Assumes information mixes linearly along attention, "
               "ignores values, MLPs and the prediction itself.",
    "flow": "Attention flow (Abnar & Zuidema 2020): the maximum flow through the attention graph with the same "
            "capacities as rollout. Same assumptions, but a path's capacity is its weakest edge; exact, so only "
            f"for T ≤ {FLOW_MAX}.",
    "attention_norm": "Attention norm (Kobayashi et al. 2020): the length of the vector each token adds to the "
                      "output token through the last layer's attention, ‖Σ_h α_h · v_h W_O^h‖ — a weight on a value "
                      "of length near 0 moves nothing. Assumes what attention writes is what matters; ignores the "
                      "residual stream and the MLP.",
    "value_zeroing": "Value zeroing (Mohebbi et al. 2023): each token's value vector zeroed in every head of the last "
                     "layer, and how far (1 − cosine) the output token's representation after the whole block moves; "
                     "rows sum to 1. Counts the residual stream, the norms and the MLP of that block; one layer, not "
                     "the path below it.",
    "relevance": "Gradient-weighted relevance (Chefer, Gur & Wolf 2021): attention weighted by its gradient for "
                 "the chosen logit (positive part, head mean), accumulated over layers. Class-specific: it "
                 "explains this prediction, not attention in general.",
    "input_x_gradient": "Input × gradient (Shrikumar et al. 2016): each token's input embedding times the logit's "
                        "gradient with respect to it, summed over the embedding. A first-order, local estimate: "
                        "it assumes the logit is linear around this input.",
    "integrated_gradients": "Integrated gradients (Sundararajan et al. 2017): the logit's gradient averaged along "
                            "the straight path from a baseline to the input, times the embedding's change. The "
                            "scores add up to logit(input) − logit(baseline) (completeness); it assumes the baseline "
                            "means “no information”.",
    "attention_x_gradient": "Attention × gradient: every attention weight times the logit's gradient with respect "
                            "to it, summed over layers, heads and query rows per key token — a first-order "
                            "estimate of how much the logit falls when every edge into the token is cut. Signed, "
                            "with no rollout (unlike gradient relevance).",
}
LABELS = {"attention": "last-layer attention", "rollout": "rollout", "flow": "flow", "attention_norm": "attention norm",
          "value_zeroing": "value zeroing", "relevance": "gradient relevance",
          "input_x_gradient": "input × gradient", "integrated_gradients": "integrated gradients",
          "attention_x_gradient": "attention × gradient"}
BENCH_LABELS = {"last_layer": "last-layer attention", "head_mean": "attention, mean of every layer and head",
                "rollout": "rollout", "flow": "flow", "attention_norm": "attention norm (last layer)",
                "value_zeroing": "value zeroing (last layer)", "relevance": "gradient relevance",
                "input_x_gradient": "input × gradient", "integrated_gradients": "integrated gradients",
                "attention_x_gradient": "attention × gradient"}  # `attnlab faithfulness`
ENCDEC_BENCH = {"last_layer": "last-layer cross-attention", "head_mean": "cross-attention, mean of every layer and head",
                "attention_norm": "attention norm (last layer's cross-attention)",
                "value_zeroing": "value zeroing (last layer's cross-attention)"}  # what an encoder–decoder's rows score
ENCDEC_MIXING = (" On an encoder–decoder the target side is the last decoder layer's self-attention, the source side "
                 "its cross-attention (a source token's value zeroed in it; the decoder block's output compared).")
FAITH_SEED = 0
UNITS = {"attention_norm": "length", "value_zeroing": "share"}  # what a context-mixing matrix holds

with page("Rollout & attribution", "Which input tokens does the model use for this output? "
          "Attention weights are not explanations — compare nine ways to trace them."):
    inp = inputs()
    cap = inp.capture()
    present = presenting()
    info = state.model_info(inp.model)
    encdec = cap.has_source
    tgt_group = "decoder" if encdec else "self"
    tokens = cap.group_tokens(tgt_group)[0]
    t = len(tokens)
    src_idx = source_index(cap, inp.preset)
    vocab = state.vocabulary(inp.model)
    unknown = unknown_positions(cap.ids, vocab)  # target-side positions read as [UNK]
    unknown_note(vocab, unknown, t, tokens=tokens)
    with options():
        c1, c2, c3, c4 = st.columns(4)
        q = token_select("Output token (query row)", tokens, "query", default_query(cap, inp.preset), where=c1,
                         help="For a decoder, row t predicts token t+1; for an encoder, the [MASK] row.")
        residual = slider("Residual weight", 0.0, 1.0, "residual", 0.5, where=c2, step=0.05,
                          help="Â = residual·I + (1 − residual)·A, rows re-normalised (0.5 in the paper).")
        fusion = select("Head fusion", ("mean", "max", "min"), "fusion", "mean", where=c3)
        discard = slider("Discard ratio", 0.0, 0.9, "discard", 0.0, where=c4, step=0.05,
                         help="Drop this share of the smallest weights per row before re-normalising.")
        pred = (cap.top_tokens[q][0], float(cap.top_probs[q][0])) if cap.top_tokens is not None else None
        targets = ["predicted"]
        answer_id = None
        if inp.preset is not None and inp.preset.answer:
            answer_id = state.token_id(inp.model, inp.preset.answer)
            if answer_id is not None:
                targets.append("answer")
        target = select("Explain the logit of", targets, "target", "predicted",
                        format_func=lambda v: (f"the predicted token “{pred[0]}”" if pred else "the predicted token")
                        if v == "predicted" else f"the expected answer “{inp.preset.answer}”", horizontal=True)

    if pred is not None:
        c1, c2 = st.columns(2)
        c1.metric(f"The model predicts (row {q})", pred[0], f"p = {pred[1]:.3f}", delta_color="off",
                  help="Top-1 of the model's next-token (or masked-token) distribution at the chosen row.")
        if inp.preset is not None and inp.preset.answer:
            same = pred[0].strip() == inp.preset.answer.strip()
            row = default_query(cap, inp.preset)
            c2.metric("Expected answer (the preset's)", inp.preset.answer,
                      ("the prediction matches" if same else "the prediction differs") if q == row
                      else f"expected at row {row}, not {q}", delta_color="off")

    rows, src_rows, matrices, notes = {}, {}, {}, {}
    dec = cap.matrices(tgt_group)  # [L, H, T, T]
    if encdec:
        enc, cross = cap.matrices("encoder"), cap.matrices("cross")
        rows["attention"] = fuse_heads(dec[-1], "mean")[q]  # [T]: the query's head-mean row of the last layer
        src_rows["attention"] = fuse_heads(cross[-1], "mean")[q]  # [S]
        cr = cross_rollout(enc, dec, cross, residual, fusion, discard)
        rows["rollout"], src_rows["rollout"] = cr.target[q], cr.source[q]
        matrices["rollout (source side)"] = (cr.source, tokens, cap.src_tokens)
        notes["flow"] = "Flow is defined here for one self-attention stack; this is an encoder–decoder."
    else:
        rows["attention"] = fuse_heads(dec[-1], "mean")[q]  # [T]: the query's head-mean row of the last layer
        r = attention_rollout(dec, residual, fusion, discard)
        rows["rollout"] = r[q]
        matrices["rollout"] = (r, tokens, tokens)
        if t <= FLOW_MAX:
            with guard():
                rows["flow"] = state.flow(inp.model, inp.text, inp.src, inp.backend, tgt_group, q, residual)
        else:
            notes["flow"] = f"Flow needs T ≤ {FLOW_MAX} tokens (exact max-flow per token); this text has {t}."
    s = len(cap.src_tokens) if encdec else None
    for m in MIXING:
        zeroing = m == "value_zeroing"
        if refused := mixing_refusal(state.model(inp.model), t if zeroing else None, s if zeroing else None):
            if refused not in notes.values():  # a view: said once for both
                notes[m] = refused
            continue
        with guard():
            layers = mixing_layers(inp.model, inp.text, inp.src, m, t, s)  # [L, T, T] / EncDecMixing, or None
            if layers is not None and encdec:  # the decoder's self-attention; its cross-attention: the source side
                last = len(layers.decoder) - 1
                rows[m], src_rows[m] = layers.decoder[-1, q], layers.cross[-1, q]
                matrices[f"{LABELS[m]} (layer {last})"] = (layers.decoder[-1], tokens, tokens)
                matrices[f"{LABELS[m]} (source side, layer {last})"] = (layers.cross[-1], tokens, cap.src_tokens)
            elif layers is not None:
                rows[m] = layers[-1, q]
                matrices[f"{LABELS[m]} (layer {len(layers) - 1})"] = (layers[-1], tokens, tokens)
    if info["has_logits"] and not lacks(inp.model, "relevance", "gradient relevance runs our model's backward pass"):
        with guard():
            rel = state.relevance(inp.model, inp.text, inp.src, q, answer_id if target == "answer" else None)
            rows["relevance"] = rel.row
            matrices["relevance"] = (rel.matrix, tokens, tokens)
            if encdec and rel.source_row is not None:
                src_rows["relevance"] = rel.source_row
                matrices["relevance (source side)"] = (rel.source_matrix, tokens, cap.src_tokens)
            notes["relevance-target"] = f"explains the logit of “{state.model(inp.model).label(rel.target_id)}”"
        embeds = has_embed_hook(state.model(inp.model))
        if not embeds:
            st.caption(f"{inp.model} is read as it is, without a hook on its input embeddings: input × gradient "
                       "and integrated gradients need a converted model.")
        with guard():
            for m in (GRADIENT_METHODS if embeds else ["attention_x_gradient"]):
                if m == "integrated_gradients" and (refused := ig_refusal(state.model(inp.model), t)):
                    notes[m] = refused
                    continue
                at = state.attribution(inp.model, inp.text, inp.src, m, q, answer_id if target == "answer" else None)
                rows[m] = at.row
                if encdec and at.source_row is not None:
                    src_rows[m] = at.source_row
                if at.steps is not None:
                    notes["ig"] = (f" Baseline: {baseline_md(at.baseline)}; {at.steps} steps. Logit {at.logit:.3f} at the input, "
                                   f"{at.baseline_logit:.3f} at the baseline; the scores sum to {at.total:.3f}, off "
                                   f"from the difference by {at.completeness_error:.2%}.")
    elif not info["has_logits"]:
        notes["relevance"] = f"{inp.model} has no prediction head, so there is no logit to explain."

    title_tok = esc(tokens[q])
    chart(method_rows({LABELS[k]: v for k, v in rows.items()}, tokens, present=present,
                      source=src_idx, exclude=q, title=f"Which tokens matter for token {q} ({title_tok})?"
                      + (" — target side" if encdec else "")), key="methods", name="methods")
    if encdec:
        chart(method_rows({LABELS[k]: v for k, v in src_rows.items()}, cap.src_tokens,
                          present=present, title="… and on the source side"), key="methods-src",
              name="methods-source")
    for k, msg in notes.items():
        if k in ASSUMES:
            st.caption(f"{LABELS[k]}: {msg}")

    summary = []
    for k, v in rows.items():
        v = np.asarray(v, dtype=float)
        ranked = [int(i) for i in np.argsort(-v) if i != q or len(v) == 1]
        top = ranked[0]
        summary.append({"method": LABELS[k], "top token": f"{top} · {tokens[top]}",
                        **({"finds the source": "✓" if top == src_idx else "✗"} if src_idx is not None else {})})
        token_strip(tokens, v, query=q, source=src_idx, label=LABELS[k], unknown=unknown)
        st.caption(ASSUMES[k] + (f" Here it {notes['relevance-target']}." if k == "relevance" and
                                 "relevance-target" in notes else "")
                   + (notes["ig"] if k == "integrated_gradients" and "ig" in notes else "")
                   + (ENCDEC_MIXING if encdec and k in MIXING else ""))
    st.dataframe(pd.DataFrame(summary), hide_index=True)
    st.caption("Top token: the highest-scoring input token other than the query itself. "
               + ("The red dotted box / underline marks the preset's ground-truth source token." if src_idx is not None
                  else ""))

    st.subheader("Over held-out examples: how often does each method find the true source?")
    bench = None
    if info["source"] == "bundled" and info["has_logits"]:
        n_ex = slider("Held-out examples", 20, 200, "faith_n", 40, step=10, show=not present,
                      help="Examples of the lecture tasks the model was not trained on, drawn with seed 0.")
        with guard():
            bench = held_out(inp.model, n_ex, FAITH_SEED)
    if bench is not None:
        labels = BENCH_LABELS | (ENCDEC_BENCH if encdec else {})
        st.dataframe(held_out_table(bench, labels), hide_index=True, key="faithfulness")
        ask_for_ig(bench, n_ex)
        st.caption(f"Top-1 agreement: the share of {bench['n_examples']} held-out examples (seed {FAITH_SEED}) where "
                   "the method's top token is the answer's known source; a random ranking scores "
                   f"{bench['chance']:.3f}. The model itself gets {bench['accuracy']:.0%} of the answers right. "
                   f"The same numbers as `attnlab faithfulness --model {inp.model} --n {n_ex} "
                   f"--seed {FAITH_SEED} --json`.")
        if "integrated_gradients" in bench:
            ig = bench["integrated_gradients"]
            st.caption(f"Integrated gradients over these examples: baseline {baseline_md(ig['baseline'])}; steps "
                       f"{min(e['steps'] for e in ig['examples'])}–{max(e['steps'] for e in ig['examples'])}; "
                       f"completeness off by {ig['mean_error']:.2%} on average, {ig['max_error']:.2%} at most.")
        with guard():
            reasons = state.ranking_reasons(inp.model, n_ex, FAITH_SEED)
        if reasons is not None:
            st.markdown("**Why the ranking comes out this way on this model**")
            for line in explain(reasons, bench["methods"], labels):
                st.markdown(f"- {line}")
    elif info["source"] != "bundled":
        st.caption(f"Only for the bundled lecture models: their held-out examples have known answer sources, and "
                   f"{inp.model} was not trained on those tasks, so there is nothing to score it against.")
    elif not info["has_logits"]:
        st.caption(f"{inp.model} has no prediction head, so there is no answer whose source a method could find.")

    if matrices:
        st.subheader("As matrices")
        which = select("Matrix", list(matrices), "rollout_matrix", None, horizontal=True)
        m, qa, ka = matrices[which]
        unit = next((v for k, v in UNITS.items() if which.startswith(LABELS[k])), None)  # else "weight"
        chart(matrix_heatmap(m, qa, ka, kind="pattern", title=f"{which}: row = output, column = input",
                             present=present, mark=(q, src_idx if ka is tokens else None), value_name=unit),
              key="matrix", name=which)

    downloads(f"rollout-q{q}", csv=pd.DataFrame({"index": range(t), "token": tokens,
                                                 **{LABELS[k]: v for k, v in rows.items()}}),
              npz={**{f"row/{k}": v for k, v in rows.items()}, **{f"source_row/{k}": v for k, v in src_rows.items()},
                   **{f"matrix/{k}": v[0] for k, v in matrices.items()}, "tokens": tokens},
              json_obj={"model": inp.model, "text": inp.text, "query": q, "residual": residual, "fusion": fusion,
                        "discard_ratio": discard, "rows": rows, "source_rows": src_rows, "summary": summary,
                        "prediction": pred, "expected": inp.preset.answer if inp.preset else None,
                        "faithfulness": bench and {k: bench[k] for k in ("n_examples", "seed", "chance", "methods")}})
