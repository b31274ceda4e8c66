"""Block (/block): one token's path through a decoder with the model's real numbers — embedding (+ position),
each block (norm, attention, residual add, norm, MLP, residual add), final norm, LM head, next-token
probabilities — then the design choices side by side on seeded random-weight decoders: pre/post/peri-LN,
LayerNorm/RMSNorm/BatchNorm (BatchNorm's leak from a later token, live), GELU/SwiGLU and QK-norm."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.analysis.machinery.norm_variants import D_MODEL, N_HEADS, N_LAYERS
from attnlab.app import state
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads
from attnlab.app.figures.block import leak_bars, per_layer, stage_vectors, stream_norms
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.inputs import require
from attnlab.app.token_strip import predictions_table, token_strip
from attnlab.app.url_state import select, slider, token_select

DIMS = 32  # dimensions of the chosen token's vector drawn per stage
COMPARE = {"residual": "pre- vs post- vs peri-LN", "norm": "LayerNorm vs RMSNorm vs BatchNorm",
           "mlp": "GELU vs SwiGLU", "qk": "QK-norm off vs on"}
POSITIONS = {"learned": "plus a learned position vector", "sinusoidal": "plus a sinusoidal position vector",
             "rope": "no position vector: RoPE rotates q and k inside every attention layer",
             "alibi": "no position vector: ALiBi adds a distance penalty to the attention scores",
             "none": "no position information at all"}


def exact(v: float) -> str:
    return "0 (exactly)" if v == 0 else f"{v:.3g}"


with page("Block", "What does each part of a transformer block do to one token, with the model's real numbers?",
          icon="▤"):
    inp = require(("next_token", "internals"), "walks a decoder's own path to its next-token prediction")
    present = presenting()
    run = inp.capture()
    tokens, T = run.tokens, len(run.tokens)
    with options():
        c1, c2, c3 = st.columns(3)
        t = token_select("Token", tokens, "query", T - 1, where=c1, help="The token whose path is followed.")
        temperature = slider("Temperature", 0.0, 2.0, "blk_temp", 1.0, step=0.1, where=c2,
                             help="0 = greedy (the plain softmax; the top token is taken). Higher = flatter.")
        top_k = slider("Top-k (0 = off)", 0, 50, "blk_topk", 0, where=c3,
                       help="Keep only the k most likely tokens before the softmax.", show=temperature > 0)
    k = (top_k or None) if temperature > 0 else None
    w = state.block_walk(inp.model, inp.text, inp.src, t, float(temperature), k)
    token_strip(tokens, query=t, label="the chosen token is outlined")

    # -- the walk -----------------------------------------------------------------------------------------
    st.subheader(f"The path of token {t} ({md(tokens[t])}) through {inp.model}")
    st.markdown(f"**{w.norm_rule}-LN**, **{w.norm_type}**, {w.n_layers} blocks. h₀ is the token's embedding, "
                f"{POSITIONS[w.positional]}. Each block: "
                + {"pre": "h ← h + Attn(Norm(h)), then h ← h + MLP(Norm(h)).",
                   "post": "h ← Norm(h + Attn(h)), then h ← Norm(h + MLP(h)) (the norm after the add).",
                   "peri": "h ← h + Norm(Attn(Norm(h))), then h ← h + Norm(MLP(Norm(h)))."}[w.norm_rule])
    st.caption("Recomputed step by step from the model's own modules; its logits against the model's forward pass: "
               f"max |Δ| = {exact(w.max_abs_vs_model)} over every position and token.")
    a, b = st.columns(2, gap="medium")
    with a:
        chart(stream_norms(w.resid_norms, w.attn_delta, w.mlp_delta, present=present,
                           title="Residual stream ‖h‖ and each update ‖Δ‖"), key="blk-norms", width=column_px(2, present, "medium")[0],
              name="block-norms")
        st.caption("Bars: ‖Δ‖ of the attention and MLP updates of each block at this token "
                   + ("(before the norm that follows the add). " if w.norm_rule == "post" else "")
                   + "Line: ‖h‖ after each block (x = 0: h₀).")
    with b:
        where_ = {-1: "embed", w.n_layers: "head"}
        stages = pd.DataFrame({"layer": [where_.get(s.layer, str(s.layer)) for s in w.steps],
                               "stage": [s.name for s in w.steps], "‖x‖": [s.norm for s in w.steps],
                               "mean": [float(s.vector.mean()) for s in w.steps],
                               "std": [float(s.vector.std()) for s in w.steps]})
        st.dataframe(stages, hide_index=True, height=400,
                     column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("‖x‖", "mean", "std")})
    vectors = np.stack([s.vector for s in w.steps])  # [stages, D]
    labels = [f"{s.layer}: {s.name}" if 0 <= s.layer < w.n_layers else s.name for s in w.steps]
    chart(stage_vectors(vectors[:, :DIMS], labels, present=present,
                        title=f"The token's vector at every stage (first {min(DIMS, vectors.shape[1])} of "
                              f"{vectors.shape[1]} dimensions)"), key="blk-vectors", name="block-vectors")
    st.caption(("A LayerNorm's output has mean ≈ 0 and std ≈ 1" if w.norm_type == "layernorm" else
                "An RMSNorm's output has root mean square ≈ 1; it subtracts no mean, so its mean need not be 0")
               + " (times its learned scale); the stream itself keeps whatever scale the updates give it.")

    st.subheader("LM head → next token")
    how = ("greedy (temperature 0): the plain softmax" if temperature == 0 else
           f"softmax(logits / {temperature:g})" + (f" over the top {top_k}" if k else ""))
    c1, c2 = st.columns([2, 3])
    with c1:
        predictions_table(w.top_tokens, w.top_probs)
    with c2:
        st.markdown(f"The final vector times the LM head gives one logit per vocabulary entry "
                    f"({len(w.logits):,}); the probabilities are {how}. Most likely: “{md(w.top_tokens[0])}” with "
                    f"p = {w.top_probs[0]:.3f} (logit {w.logits[w.top_ids[0]]:.3f}).")

    # -- variants on random weights --------------------------------------------------------------------------
    st.subheader("Design choices side by side")
    c1, c2 = st.columns([3, 1])
    kind = select("Compare", list(COMPARE), "blk_cmp", "residual", where=c1, format_func=COMPARE.get)
    seed = slider("Seed", 0, 9, "blk_seed", 0, where=c2, help="torch.manual_seed for the random weights.")
    st.info(f"Random-weight decoders (seed {seed}; d_model {D_MODEL}, {N_HEADS} heads, {N_LAYERS} layers, learned "
            f"positions), not {inp.model}: they read the same tokens, and share every weight whose shape the "
            "choice leaves unchanged.", icon=":material/casino:")
    vs = state.block_variants(inp.model, inp.text, inp.src, kind, t, seed)
    table = pd.DataFrame({"variant": [v.name for v in vs], "weights shared": [f"{a} of {n} tensors" for a, n in
                                                                              (v.shared for v in vs)],
                          "MLP parameters": [v.mlp_params for v in vs],
                          "‖h‖ after the last block": [float(v.resid_norms[-1]) for v in vs],
                          "top next token": [v.top_token for v in vs]})
    st.dataframe(table, hide_index=True)
    a, b = st.columns(2)
    if kind == "qk":
        with a:
            chart(per_layer({v.name: v.score_std for v in vs}, ylabel="std", present=present,
                            title="Std of the scaled scores q·kᵀ/√d (visible cells)"), key="blk-qk-std", width=column_px(2, present)[0],
                  name="qk-std")
        with b:
            chart(per_layer({v.name: v.score_max for v in vs}, ylabel="max |score|", present=present,
                            title="Max |scaled score|"), key="blk-qk-max", width=column_px(2, present)[0], name="qk-max")
        st.caption("QK-norm normalises every head's q and k before the dot product, so the score scale no longer "
                   "follows the size of the weights: it is set by the norms' learned scales.")
    else:
        with a:
            chart(per_layer({v.name: v.resid_norms for v in vs}, ylabel="‖h‖", present=present, with_embed=True,
                            title="‖h‖ at the chosen token, layer by layer"), key="blk-v-resid", width=column_px(2, present)[0], name="variant-resid")
        with b:
            what = "mlp_delta" if kind == "mlp" else "attn_delta"
            chart(per_layer({v.name: getattr(v, what) for v in vs}, present=present,
                            ylabel="‖Δ‖", title=f"‖{'MLP' if kind == 'mlp' else 'attention'} update‖ per block"),
                  key="blk-v-delta", width=column_px(2, present)[0], name="variant-delta")
    leak = None
    if kind == "norm" and t == T - 1:
        st.caption("BatchNorm's attention update at the last token is near 0: random weights attend almost "
                   "uniformly, and BatchNorm's output averages to exactly 0 per feature over the whole sequence.")
    if kind == "norm" and T < 2:
        st.info("Type a text of two tokens or more to change a later token and watch an earlier one.")
    elif kind == "norm":
        st.markdown("**BatchNorm leaks the future.** It normalises each feature over the batch *and the sequence*, "
                    "so changing a later token moves every earlier token's output; LayerNorm and RMSNorm normalise "
                    "each token on its own, and causal attention keeps earlier tokens blind to later ones.")
        c1, c2 = st.columns(2)
        changed = select("Change token", list(range(1, T)), "blk_change", T - 1, where=c1,
                         format_func=lambda i: f"{i} · {tokens[i]}")
        labels_of = dict(reversed(list(zip(run.ids, run.tokens))))  # id -> its first label in the text
        others = [i for i in dict.fromkeys(run.ids) if i != run.ids[changed]]
        new_id = select("to", [*others, -1], "blk_new", others[0] if others else -1, where=c2,
                        format_func=lambda i: "the next token id" if i == -1 else labels_of[i])
        leak = state.norm_leak(inp.model, inp.text, inp.src, changed, None if new_id == -1 else new_id, seed)
        chart(leak_bars(leak.delta, tokens, changed, present=present,
                        title=f"Change token {changed} to “{leak.new_token}”: how far each output moves"),
              key="blk-leak", name="norm-leak")
        before = {n: float(d[:changed].max()) if changed else 0.0 for n, d in leak.delta.items()}
        st.markdown(" · ".join(f"**{n}**: max |Δ| before token {changed} = {exact(v)}" for n, v in before.items()))

    downloads("block", csv=stages,
              npz={"vectors": vectors, "resid_norms": w.resid_norms, "attn_delta": w.attn_delta,
                   "mlp_delta": w.mlp_delta, "logits": w.logits, "tokens": tokens},
              json_obj={"model": inp.model, "text": inp.text, "token": t, "temperature": temperature, "top_k": k,
                        "stages": [s.name for s in w.steps], "norms": [s.norm for s in w.steps],
                        "resid_norms": w.resid_norms, "attn_delta": w.attn_delta, "mlp_delta": w.mlp_delta,
                        "max_abs_vs_model": w.max_abs_vs_model, "top_tokens": w.top_tokens, "top_probs": w.top_probs,
                        "compare": kind, "seed": seed, "variants": table.to_dict("records"),
                        "leak": None if leak is None else {n: d for n, d in leak.delta.items()}})
