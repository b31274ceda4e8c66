"""Step by step (/step-by-step): softmax(Q·Kᵀ/√d_k)·V in its steps on a small editable example, one head or
several, and a quiz ("what is α₂,₂ under a causal mask?") that checks the answer and explains it."""

import numpy as np
import streamlit as st
from attnlab.analysis.attention.stepwise import (
    QUIZ_SCORES,
    QUIZ_V,
    attention_steps,
    explain_weight,
    multi_head_steps,
)
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.grids import number_grid
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.step_inputs import flag, matrix_editor, quiz_next, reset_matrices
from attnlab.app.url_state import URL, kept, select, toggle, url_active
from attnlab.model.masks import BIDIRECTIONAL, CAUSAL, mask_array

D_MODEL = 4
MODES = {"scores": "a score table", "qkv": "queries, keys and values"}
MASKS = {"causal": "causal (decoder)", "none": "none (encoder)", "padding": "padding (last key is padding)"}


def example(kind: str, T: int, d: int, seed: int) -> np.ndarray:
    """The default matrices: the lecture's quiz for a 4×4 score table, else small seeded numbers."""
    if kind == "scores" and T == 4:
        return QUIZ_SCORES
    if kind == "v2" and T == 4:
        return QUIZ_V
    return np.round(np.random.default_rng(seed).normal(size=(T, d)), 1)


def mask_of(kind: str, T: int) -> np.ndarray:
    if kind == "causal":
        return mask_array(CAUSAL, T)
    if kind == "padding":  # the last key is padding (one real key at least)
        return mask_array(BIDIRECTIONAL, T, real_keys=max(1, T - 1))
    return mask_array(BIDIRECTIONAL, T)


with page("Step by step", "softmax(Q·Kᵀ / √d_k) · V: what happens at each step?", icon="∑"):
    present = presenting()
    with options():
        c1, c2, c3, c4 = st.columns(4)
        mode = select("Start from", list(MODES), "sbs_mode", "scores", where=c1, format_func=MODES.get)
        mask_kind = select("Mask", list(MASKS), "sbs_mask", "causal", where=c2, format_func=MASKS.get)
        T = select("Tokens (T)", [2, 3, 4, 5, 6], "sbs_T", 4, where=c3)
        quiz = toggle("Quiz mode", "sbs_quiz", False, where=c4, help="Hide the weights and ask for one of them.")
        if mode == "scores":
            dk = select("d_k (the table is divided by √d_k)", [1, 2, 4, 16, 64], "sbs_dk", 1, where=c3,
                        help="1: the table already holds scaled scores, as in the lecture's quiz.")
            heads = 1
        else:
            heads = select("Heads", [1, 2, 4], "sbs_heads", 1, where=c2,
                           help=f"d_model = {D_MODEL}: each head gets d_head = {D_MODEL}/heads columns of Q, K, V.")
            dk = D_MODEL // heads
    mask = mask_of(mask_kind, T)
    qs = [f"q{i + 1}" for i in range(T)]
    ks = [f"k{j + 1}" for j in range(T)]

    # -- the inputs -----------------------------------------------------------------------------------
    if mode == "scores":
        st.markdown("Edit any cell. Rows are queries, columns are keys, both counted from 1 as in the lecture.")
        left, right = st.columns([3, 2])
        with left:
            S = matrix_editor("**Scores** (one row per query)", "sbs_scores", example("scores", T, T, 1),
                              row_labels=qs, col_labels=ks)
        with right:
            V = matrix_editor("**Values V** (one row per key)", "sbs_v", example("v2", T, 2, 2),
                              row_labels=[f"v{j + 1}" for j in range(T)], col_labels=["d1", "d2"])
        st.button("Back to the lecture's example", on_click=reset_matrices,
                  args=((("sbs_scores", QUIZ_SCORES), ("sbs_v", QUIZ_V)),), disabled=T != 4)
        steps = [attention_steps(scores=S, v=V, mask=mask, scale=1 / np.sqrt(dk))]
        output = steps[0].output
    else:
        st.markdown(f"Edit any cell. Each row is one token's query, key or value vector (d_model = {D_MODEL}). "
                    "A real layer computes them as x·W_Q, x·W_K, x·W_V from the token's embedding x.")
        cols = st.columns(3)
        dims = [f"d{i + 1}" for i in range(D_MODEL)]
        Q, K, V = (matrix_editor(f"**{n}**", f"sbs_{n}", example("qkv", T, D_MODEL, seed), row_labels=[
            f"{n.lower()}{i + 1}" for i in range(T)], col_labels=dims, where=cols[c])
                   for c, (n, seed) in enumerate((("Q", 3), ("K", 4), ("V", 5))))
        steps, output = multi_head_steps(Q, K, V, heads, mask=mask)

    shown = 0
    if heads > 1:
        shown = select("Show the steps of head", list(range(heads)), "sbs_head", 0, horizontal=True,
                       format_func=lambda h: f"head {h + 1} (columns {h * dk + 1}–{(h + 1) * dk})")
    s = steps[shown]

    # -- the quiz question ------------------------------------------------------------------------------
    ask = (min(2, T), min(2, T))
    if quiz:
        raw = st.session_state.get("sbs_ask") or (st.query_params.get("sbs_ask") if url_active() else None) \
            or kept().get("sbs_ask") or "2,2"
        try:
            i, j = (int(x) for x in str(raw).split(","))
            ask = (i, j) if 1 <= i <= T and 1 <= j <= T else ask
        except ValueError:
            pass
        st.session_state["sbs_ask"] = f"{ask[0]},{ask[1]}"
        st.session_state.setdefault(URL, {})["sbs_ask"] = f"{ask[0]},{ask[1]}"
        # a new question (other cell, numbers, mask or head) starts without an answer
        sig = (ask, mode, mask_kind, shown, s.weights.round(6).tobytes())
        if st.session_state.get("_sbs_sig") != sig:
            st.session_state["_sbs_sig"] = sig
            st.session_state.pop("sbs_answer", None)
            st.session_state["_sbs_reveal"] = False
    mark = (ask[0] - 1, ask[1] - 1) if quiz else None

    # -- the steps ------------------------------------------------------------------------------------
    head_note = f" — head {shown + 1} of {heads}" if heads > 1 else ""
    st.subheader(f"The steps{head_note}")
    a, b = st.columns(2)
    with a:
        title = "① Scores S = Q·Kᵀ" if mode == "qkv" else "① Scores (your table)"
        chart(number_grid(s.raw, qs, ks, title=title, present=present, mark=mark), key="sbs-raw", width=column_px(2, present)[0],
              name="scores")
        st.caption("Each cell is the dot product of a query row with a key row: how well they match."
                   if mode == "qkv" else "Rows are queries, columns are keys.")
    with b:
        chart(number_grid(s.scaled, qs, ks, title=f"② Scaled: × 1/√d_k = × {s.scale:.3g}", present=present,
                          mark=mark), key="sbs-scaled", width=column_px(2, present)[0], name="scaled")
        st.caption(f"d_k = {dk}. Without this factor dot products grow with the dimension and the softmax saturates "
                   "(one weight near 1, the rest near 0: vanishing gradients).")
    a, b = st.columns(2)
    with a:
        chart(number_grid(s.masked, qs, ks, title="③ Masked: −∞ where a query may not look", present=present,
                          mark=mark), key="sbs-masked", width=column_px(2, present)[0], name="masked")
        st.caption({"causal": "Causal: query i sees keys 1…i. The −∞ goes in BEFORE the softmax, so every row still "
                              "sums to 1 (zeroing weights afterwards would need another normalisation).",
                    "none": "No mask: every query sees every key (an encoder such as BERT).",
                    "padding": f"Padding masks a KEY (k{T}) for every query: a column, not a pair of positions."}
                   [mask_kind])
    answered = False
    with b:
        hide = quiz and not st.session_state.get("_sbs_reveal", False)
        if quiz:
            answered = st.session_state.get("sbs_answer") is not None
            hide = hide and not answered
        chart(number_grid(s.weights, qs, ks, title="④ Softmax of each row: the weights α", kind="weights",
                          present=present, fmt="{:.3f}", mark=mark, hidden=hide),
              key="sbs-weights", width=column_px(2, present)[0], name="weights")
        if hide:
            st.caption("Quiz mode: the weights appear once you answer below.")
        else:
            sums = ", ".join(f"{x:.3f}" for x in s.weights.sum(-1))
            st.caption(f"α_ij = exp(s_ij) / Σ_j' exp(s_ij'), over the keys row i may see. Row sums: {sums}.")

    # -- quiz -----------------------------------------------------------------------------------------
    if quiz:
        i, j = ask
        e = explain_weight(s, i - 1, j - 1)
        mask_words = {"causal": "a causal mask", "none": "no mask", "padding": "a padding mask on the last key"}
        st.subheader("Quiz")
        st.markdown(f"With the scores above{' (head ' + str(shown + 1) + ')' if heads > 1 else ''} and "
                    f"{mask_words[mask_kind]}, what is **α<sub>{i},{j}</sub>** — the weight query {i} gives to key "
                    f"{j}?", unsafe_allow_html=True)
        q1, q2, q3 = st.columns([2, 1, 1])
        ans = q1.number_input("Your answer (0 to 1)", min_value=0.0, max_value=1.0, value=None, step=0.01,
                              format="%.3f", key="sbs_answer")
        q2.button("Another question", on_click=quiz_next, args=("sbs_ask", T, mask_kind == "causal"))
        q3.button("Show the answer", on_click=flag, args=("_sbs_reveal",))
        if ans is not None or st.session_state.get("_sbs_reveal"):
            if ans is not None:
                if abs(ans - e["weight"]) <= 0.005:
                    st.success(f"Correct: α_{i},{j} = {e['weight']:.3f}.", icon=":material/check_circle:")
                else:
                    st.error(f"Not quite: you said {ans:.3f}; α_{i},{j} = {e['weight']:.3f}.", icon=":material/cancel:")
            vis = [c + 1 for c in np.nonzero(e["visible"])[0]]
            if e["masked"]:
                why = (f"Key {j} is masked for query {i}, so its score becomes −∞ before the softmax and "
                       f"exp(−∞) = 0: **α<sub>{i},{j}</sub> = 0**.")
            else:
                sc = ", ".join(f"{e['scores'][c - 1]:.3g}" for c in vis)
                ex = " + ".join(f"{e['exp'][c - 1]:.3f}" for c in vis)
                why = (f"Row {i} may look at keys {', '.join(map(str, vis))}; their scaled scores are {sc}. "
                       f"Softmax (shifted by the row's largest score, which cancels): exp values {ex} = "
                       f"{e['total']:.3f}. So α<sub>{i},{j}</sub> = {e['exp'][j - 1]:.3f} / {e['total']:.3f} = "
                       f"**{e['weight']:.3f}**.")
                if mask_kind == "causal" and i == 2 and j == 2 and np.allclose(e["scores"][:2], [1, 1]):
                    why += " Both visible scores are equal (1 and 1), so the two keys share the weight: ½ each."
            st.markdown(why, unsafe_allow_html=True)

    # -- weighted sum of values ------------------------------------------------------------------------
    if not (quiz and hide):
        st.subheader("⑤ Weighted sum of the values: output = α · V")
        a, b = st.columns(2)
        v_shown = V if heads == 1 else V[:, shown * dk:(shown + 1) * dk]
        vdims = [f"d{c + 1}" for c in range(v_shown.shape[1])] if heads == 1 else \
            [f"d{shown * dk + c + 1}" for c in range(dk)]
        with a:
            chart(number_grid(v_shown, [f"v{j + 1}" for j in range(T)], vdims, title="V (one row per key)",
                              kind="values", present=present), key="sbs-v", width=column_px(2, present)[0], name="values")
        with b:
            chart(number_grid(s.output, qs, vdims, title="Output: one row per query", kind="values",
                              present=present), key="sbs-out", width=column_px(2, present)[0], name="output")
        st.caption("Each output row is a mix of the value rows, weighted by that query's row of α.")

    if heads > 1 and not (quiz and hide):
        st.subheader(f"Multi-head: {heads} heads of d_head = {dk}")
        cols = st.columns(heads)
        for h, c in enumerate(cols):
            with c:
                chart(number_grid(steps[h].weights, qs, ks, title=f"head {h + 1}: α", kind="weights",
                                  present=present, fmt="{:.2f}"), key=f"sbs-head{h}", width=column_px(heads, present)[0], name=f"head{h + 1}")
        single = attention_steps(Q, K, V, mask=mask)
        a, b = st.columns(2)
        with a:
            chart(number_grid(output, qs, [f"d{c + 1}" for c in range(D_MODEL)],
                              title="Concatenated heads (then × W_O, here the identity)", kind="values",
                              present=present), key="sbs-concat", width=column_px(2, present)[0], name="concat")
        with b:
            chart(number_grid(single.weights, qs, ks, title=f"One head over all {D_MODEL} dims: α", kind="weights",
                              present=present), key="sbs-single", width=column_px(2, present)[0], name="single-head")
        st.caption("Each head compares only its own columns of Q and K, with its own scale 1/√d_head, so heads can "
                   "attend to different keys; one big head mixes all columns into one pattern. The four matrix "
                   "multiplies: QKV projection, Q·Kᵀ, α·V, output projection.")

    downloads("step-by-step", csv=matrix_csv(s.weights, qs, ks),
              npz={"raw": s.raw, "scaled": s.scaled, "masked": s.masked, "weights": s.weights, "output": output,
                   "mask": mask},
              json_obj={"mode": mode, "mask": mask_kind, "heads": heads, "d_k": dk, "scale": s.scale,
                        "raw": s.raw, "scaled": s.scaled, "weights": s.weights, "output": output})
