"""Positions (/positions): how a transformer knows where a token is — sinusoidal and learned embeddings, RoPE
(scores depend only on the relative offset, shown numerically) and ALiBi's distance bias; the model in use and
the formulas."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.machinery import positions as M
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads
from attnlab.app.figures.grids import table_heatmap
from attnlab.app.figures.lines import curves
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import require
from attnlab.app.url_state import select, slider

SCHEMES = {"sinusoidal": "Sinusoidal", "learned": "Learned", "rope": "RoPE", "alibi": "ALiBi"}
LEARNED_MODELS = ("minilm", "random-decoder")

def rope_scaling_section(freqs: dict, name: str, present: bool) -> None:
    """The model's own RoPE frequencies: wavelength per pair of dims before and after its scaling."""
    sc = freqs["scaling"]
    st.subheader("This model's frequencies" + ("" if sc["kind"] == "none" else f" ({sc['kind']} RoPE scaling)"))
    pairs = np.arange(len(freqs["theta"]))
    series = {"wavelength used (tokens)": freqs["wavelength"]}
    if sc["kind"] != "none":
        series["without scaling"] = freqs["wavelength_plain"]
    chart(curves(pairs, series, log_y=True, markers=True, xlabel="dimension pair i", ylabel="2π/θᵢ (tokens, log)",
                 present=present, title=f"{name}: wavelength of each rotating pair"), key="pos-rope-freq",
          name="rope-frequencies")
    table = pd.DataFrame({"pair i": pairs, "θᵢ plain": freqs["theta_plain"], "θᵢ used": freqs["theta"],
                          "wavelength plain": freqs["wavelength_plain"], "wavelength used": freqs["wavelength"],
                          "stretch": freqs["stretch"]})
    st.dataframe(table.style.format({c: "{:.4g}" for c in table.columns if c != "pair i"}), hide_index=True)
    if sc["kind"] == "linear":
        st.caption(f"Linear scaling divides every θᵢ by {sc['factor']:g}: positions are squeezed so a context "
                   f"{sc['factor']:g}× longer maps onto the angles seen in training.")
    elif sc["kind"] == "llama3":
        lo, hi = sc["original_context"] / sc["low_freq_factor"], sc["original_context"] / sc["high_freq_factor"]
        st.caption(f"Llama 3 scaling: wavelengths shorter than {hi:g} tokens are kept, longer than {lo:g} are "
                   f"stretched {sc['factor']:g}×, and those between are blended (original context "
                   f"{sc['original_context']} tokens).")


with page("Positions", "Attention itself ignores order. How does the model know where each token is?", icon="⌖"):
    inp = require(("internals",), "reads the model's position embeddings")
    present = presenting()
    info = state.model_info(inp.model)
    own = info["positional"]
    d_model, n_heads = int(info["d_model"]), int(info["heads"])
    st.markdown(f"The model in use, **{info['name']}**, uses **{own}** positions "
                f"(d_model {d_model}, {n_heads} heads, context {info['context']} tokens). Without any position "
                "information self-attention is permutation-equivariant: shuffle the tokens and every output is "
                "shuffled the same way.")
    scheme = select("Scheme", list(SCHEMES), "pos_scheme", own if own in SCHEMES else "sinusoidal",
                    format_func=SCHEMES.get, horizontal=True)
    P = slider("Positions shown", 8, 128, "pos_n", 48)
    arrays: dict = {}

    if scheme == "sinusoidal":
        st.subheader("Sinusoidal: a fixed table added to the embeddings")
        st.latex(r"PE_{p,2i} = \sin\!\left(p / 10000^{2i/d}\right),\qquad PE_{p,2i+1} = \cos\!\left(p / 10000^{2i/d}"
                 r"\right)")
        d = d_model if own == "sinusoidal" else 64
        table = M.sinusoidal(P, d)
        arrays = {"sinusoidal": table}
        a, b = st.columns(2, gap="medium")
        with a:
            chart(table_heatmap(table, xlabel="dimension", ylabel="position", value_name="PE",
                                present=present, title=f"PE [{P} positions × {d} dims]"), key="pos-sin", width=column_px(2, present, "medium")[0],
                  name="sinusoidal")
        with b:
            chart(table_heatmap(M.similarity(table), xlabel="position", ylabel="position", value_name="cos",
                                present=present, diverging=False,
                                title="cosine similarity between positions"),
                  key="pos-sin-sim", width=column_px(2, present, "medium")[0], name="sinusoidal-similarity")
        dims = [0, 2, min(8, d - 2), d // 2]
        chart(curves(np.arange(P), {f"dim {i} (wavelength {2 * np.pi * 10000 ** (i / d):.0f})": table[:, i]
                                    for i in dict.fromkeys(dims)}, xlabel="position", ylabel="PE",
                     present=present, title="Each pair of dimensions is a wave of its own frequency"),
              key="pos-sin-waves", name="sinusoidal-waves")
        st.caption("Low dimensions change fast, high ones slowly — like the digits of a clock. The similarity of two "
                   "positions depends (almost) only on their distance, so the model can learn to attend by offset.")
        if own == "sinusoidal":
            kind, mine = mechanics.position_table(inp.model)
            err = float(np.abs(mine[:P] - table).max())
            st.success(f"{info['name']} adds exactly this table to its token embeddings (max |Δ| = {err:.1e}).",
                       icon=":material/check_circle:")

    elif scheme == "learned":
        st.subheader("Learned: one trained vector per position (BERT, GPT-2)")
        choices = list(dict.fromkeys(([inp.model] if own == "learned" else []) + list(LEARNED_MODELS)))
        src = select("Table from", choices, "pos_model", choices[0],
                     help="A model whose positions are learned: MiniLM (trained, BERT-style) or a random model.")
        kind, table = mechanics.position_table(src)
        if table is None:
            st.warning(f"{src} has {kind} positions, no learned table.")
        else:
            n = min(P, table.shape[0])
            arrays = {"learned": table[:n]}
            a, b = st.columns(2, gap="medium")
            with a:
                chart(table_heatmap(table[:n], xlabel="dimension", ylabel="position", value_name="weight",
                                    present=present,
                                    title=f"{src}: position embeddings [{n} of {table.shape[0]} × {table.shape[1]}]"),
                      key="pos-learned", width=column_px(2, present, "medium")[0], name="learned")
            with b:
                chart(table_heatmap(M.similarity(table[:n]), xlabel="position", ylabel="position",
                                    value_name="cos", present=present, diverging=False,
                                    title="cosine similarity between positions"), key="pos-learned-sim", width=column_px(2, present, "medium")[0],
                      name="learned-similarity")
            note = ("Random initial weights: no structure, every position unrelated to its neighbours."
                    if src.startswith("random-") else
                    "Training made neighbouring positions similar (the bright band near the diagonal), without being "
                    "told that positions are ordered.")
            st.caption(f"{note} The table has exactly {table.shape[0]} rows: a learned model has no vector for "
                       "position " + f"{table.shape[0]} or later, so it cannot extrapolate beyond its context.")

    elif scheme == "rope":
        st.subheader("RoPE: rotate q and k by their position; the score sees only the offset")
        st.latex(r"q_m = R_{\theta m}\,q,\quad k_n = R_{\theta n}\,k\quad\Rightarrow\quad q_m^\top k_n = "
                 r"q^\top R_{\theta (n-m)}\,k,\qquad \theta_i = \text{base}^{-2i/d}")
        freqs = M.rope_frequencies(state.model(inp.model).cfg) if own == "rope" else None
        d = freqs["rotary_dims"] if freqs else 16
        base = freqs["base"] if freqs else 10000.0
        demo = M.rope_demo(d, P, base)
        arrays = {"rope_scores": demo["S"], "absolute_scores": demo["A"], "spread_rope": demo["spread_rope"],
                  "spread_absolute": demo["spread_abs"], "angles": demo["angles"]}
        st.markdown(f"One fixed query vector q and key vector k (d_head = {d}), placed at every position m and n. "
                    "With RoPE the score depends only on n − m: each diagonal of the matrix is one number. Adding "
                    "absolute (sinusoidal) positions to the same q and k instead gives scores that change along a "
                    "diagonal.")
        a, b = st.columns(2, gap="medium")
        with a:
            chart(table_heatmap(demo["S"], xlabel="key position n", ylabel="query position m", value_name="score",
                                present=present, title="RoPE: rot(q, m) · rot(k, n)"),
                  key="pos-rope", width=column_px(2, present, "medium")[0], name="rope-scores")
        with b:
            chart(table_heatmap(demo["A"], xlabel="key position n", ylabel="query position m", value_name="score",
                                present=present, title="absolute: (q + p_m) · (k + p_n)"),
                  key="pos-abs", width=column_px(2, present, "medium")[0], name="absolute-scores")
        chart(curves(demo["offsets"], {"RoPE": demo["spread_rope"], "absolute (sinusoidal added)":
                                       demo["spread_abs"]}, log_y=True, markers=True,
                     xlabel="offset m − n", ylabel="max − min along the diagonal (log)", present=present,
                     title="Spread of the scores at a fixed offset"), key="pos-spread", name="rope-spread")
        diag = pd.DataFrame(demo["diagonals"], index=[f"offset {o}" for o in range(len(demo["diagonals"]))],
                            columns=[f"m = {o}…" if o == 0 else str(o) for o in range(demo["diagonals"].shape[1])])
        st.markdown(f"**The numbers**: score at (m + offset, m) for m = 0, 1, 2, … — every row repeats one value "
                    f"(largest spread over all offsets: {np.nanmax(demo['spread_rope']):.1e}, float32 rounding).")
        st.dataframe(diag.style.format("{:.5f}", na_rep="—"), width="stretch")
        chart(table_heatmap(demo["cos_angles"], xlabel="dimension pair i", ylabel="position",
                            value_name="cos θᵢp", present=present,
                            title="cos of the rotation angle θᵢ·p per pair of dimensions"), key="pos-angles",
              name="rope-angles")
        if freqs:
            part = "" if d == freqs["d_head"] else f" (the first {d} of its {freqs['d_head']} dims; the rest carry no " \
                "position)"
            local = "" if freqs["local_base"] is None else f" (base {freqs['local_base']:g}, unscaled, on its " \
                f"{len(freqs['local_layers'])} sliding-window layers)"
            st.caption(f"{info['name']} uses RoPE with base {base:g}{local} on {d} dims per head{part}: these are its "
                       "angles" + (" before scaling." if freqs["scaling"]["kind"] != "none" else "."))
            rope_scaling_section(freqs, info["name"], present)
            arrays |= {"theta_used": freqs["theta"], "theta_plain": freqs["theta_plain"]}

    else:
        st.subheader("ALiBi: no embedding — a penalty on the scores that grows with distance")
        st.latex(r"\text{score}_{ij} = \frac{q_i^\top k_j}{\sqrt{d_k}} - m_h\,(i - j),\qquad m_h = 2^{-8h/H}")
        H = select("Heads", [4, 8, 12, 16], "pos_heads", n_heads if n_heads in (4, 8, 12, 16) else 8,
                   horizontal=True)
        T = min(P, 24)
        al = M.alibi(H, T)
        arrays = {"alibi_bias": al["bias"], "slopes": al["slopes"], "mask": al["mask"]}
        pos = [str(i) for i in range(T)]  # al["bias"] [H, T, T]; [None] makes it one "layer" [1, H, T, T]
        chart(mosaic(al["bias"][None], pos, pos, mask=al["mask"], kind="scores", present=present,
                     layer_labels=["bias"], title=f"ALiBi bias per head (T = {T}; masked cells grey)"),
              key="pos-alibi", name="alibi")
        a, b = st.columns([2, 3], gap="medium")
        with a:
            st.dataframe(pd.DataFrame({"head": range(H), "slope m_h": al["slopes"],
                                       "distance where bias = −ln 2": al["half_life"]}).style.format(
                {"slope m_h": "{:.4f}", "distance where bias = −ln 2": "{:.1f}"}), hide_index=True)
        with b:
            chart(curves(np.arange(T), {f"head {h}": al["last_weights"][h] for h in range(H)},
                         xlabel="key position", ylabel="weight", present=present,
                         title=f"Query {T - 1} with equal raw scores: weights from the bias alone"),
                  key="pos-alibi-w", width=column_px([2, 3], present, "medium")[1], name="alibi-weights")
        st.caption("Steep heads (large m) look only at the last few tokens, gentle ones far back. Nothing is learned "
                   "and nothing is added to the embeddings, so ALiBi extrapolates to longer inputs.")

    first = next(iter(arrays.values()), None)  # its CSV: the array flattened to 2-D [rows, last dimension]
    downloads(f"positions-{scheme}", csv=pd.DataFrame(first.reshape(-1, first.shape[-1])).to_csv(index=False)
              if first is not None and first.ndim >= 2 else None, npz=arrays or None,
              json_obj={"model": inp.model, "scheme": scheme, "positions": P, "model_positional": own} | arrays)
