"""Routing (/routing): a mixture-of-experts model's router at work — per token and layer the chosen experts and
their weights, each expert's load against the uniform share, the router's entropy per token, forcing a token
to another expert (and the next-token prediction before and after), and which experts take which tokens."""

import numpy as np
import pandas as pd
import streamlit as st
from attnlab.app import state
from attnlab.app.downloads import downloads
from attnlab.app.figures.routing import class_share, entropy_lines, gate_heatmap, load_bars
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.inputs import Inputs, inputs
from attnlab.app.presets import default_query, presets
from attnlab.app.token_strip import predictions_table, token_strip
from attnlab.app.url_state import index, select, toggle, token_select
from attnlab.model.registry import bundled_names

MOE_MODEL = "lecture-moe"  # the page's own model when the session's has no experts
SPECIALISATION_N = 300  # held-out lecture examples routed for the specialisation table


def answered_preset(model: str, backend: str):
    """The first sample `model` answers right (its top prediction at the sample's query row is the answer), else
    the first sample: the page's demo should not open on a wrong answer."""
    ps = presets(model)
    for p in ps:
        if p.answer:
            cap = state.capture(model, p.text, None, backend)
            q = default_query(cap, p)
            if cap.top_tokens is not None and cap.top_tokens[q][0].strip() == p.answer.strip():
                return p
    return ps[0]


def moe_inputs() -> Inputs:
    """The session's inputs when its model has experts; else lecture-moe on its first sample, said so."""
    inp = inputs()
    if state.model_info(inp.model).get("experts"):
        return inp
    if MOE_MODEL not in bundled_names():
        st.info(f"**{inp.model}** has no mixture-of-experts layers: every token goes through the same MLP, so "
                "there is no router to show. Pick a model with experts (a Mixtral folder, or lecture-moe).",
                icon=":material/info:")
        st.stop()
    p = answered_preset(MOE_MODEL, inp.backend)
    st.info(f"**{inp.model}** has no mixture-of-experts layers (every token goes through the same MLP), so this "
            f"page alone uses **{MOE_MODEL}** on its sample “{p.title}”. The other pages keep **{inp.model}**; "
            f"to route your own text, pick {MOE_MODEL} (or a Mixtral folder) in the sidebar.",
            icon=":material/swap_horiz:")
    return Inputs(MOE_MODEL, p.text, None, inp.backend, p, "decoder")


with page("Routing", "Which experts does each token go to — and what changes when a token is sent elsewhere?",
          icon=":material/alt_route:"):
    inp = moe_inputs()
    present = presenting()
    r, run = state.route_text(inp.model, inp.text, inp.src, inp.backend)
    tokens, T, L, E = r.tokens, len(r.tokens), len(r.sites), r.n_experts
    with options():
        c1, c2, c3 = st.columns(3)
        layer = index("Layer", L, "rt_layer", 0, where=c1)
        t = token_select("Token", tokens, "query", T - 1, where=c2, help="The token to force to another expert.")
        first = int(r.choice[layer, t, 0])
        chosen = {int(e) for e in r.choice[layer, t]}  # the token's top-k now: forcing one of them changes little
        expert = select("Send it to expert", list(range(E)), "rt_expert",
                        next((e for e in range(E) if e not in chosen), (first + 1) % E), where=c3,
                        format_func=lambda e: f"E{e}" + (" (its first choice now)" if e == first else ""))
    token_strip(tokens, query=t, label="the token to force is outlined")
    st.markdown(f"**{inp.model}**: {L} layers, {E} experts per layer, each token goes to the top {r.top_k} "
                f"(router softmax over all {E}, the top {r.top_k} renormalised to sum to 1).")

    # -- routing of the text ------------------------------------------------------------------------------
    # the heatmap, then its table below it (beside it, the table was cut at 1024 px)
    chart(gate_heatmap(r.gates[layer], tokens, chosen=r.choice[layer], present=present,
                       title=f"Layer {layer}: router weight per token and expert"), key="rt-gates",
          name="routing-gates")
    table = pd.DataFrame({"token": [f"{i} {tok}" for i, tok in enumerate(tokens)],
                          **{f"choice {s + 1}": [f"E{e} ({w:.2f})" for e, w in zip(r.choice[layer, :, s],
                                                                                r.weights[layer, :, s])]
                             for s in range(r.top_k)},
                          "entropy (bits)": r.entropy[layer]})
    st.dataframe(table, hide_index=True, height=min(600, 38 + 35 * T),
                 column_config={"entropy (bits)": st.column_config.NumberColumn(format="%.3f")})
    # load and entropy one above the other (side by side, their axis labels ran together at 1024 px)
    chart(load_bars(r.load, r.uniform, present=present, title="Expert load per layer (this text)"),
          key="rt-load", name="routing-load")
    busiest = r.load.max(1)
    st.caption(f"Uniform share {r.uniform:.3g}. Busiest expert per layer: "
               + ", ".join(f"layer {i}: E{int(r.load[i].argmax())} ({v:.0%})" for i, v in enumerate(busiest))
               + ". Training adds a load-balancing loss that pulls the load toward uniform.")
    chart(entropy_lines(r.entropy, tokens, float(np.log2(E)),
                        present=present, title="Router entropy per token"), key="rt-entropy",
          name="routing-entropy")
    st.caption("0 bits: the router is sure of one expert; log₂(experts) bits: it cannot tell them apart.")

    # -- the intervention ---------------------------------------------------------------------------------------
    st.subheader(f"Force token {t} ({md(tokens[t])}) to E{expert} at layer {layer}")
    res = state.force_expert(inp.model, inp.text, inp.src, layer, t, expert, inp.backend)
    was = ", ".join(f"E{e} ({w:.2f})" for e, w in zip(res["before"].choice[layer, t], res["before"].weights[layer, t]))
    now = ", ".join(f"E{e} ({w:.2f})" for e, w in zip(res["after"].choice[layer, t], res["after"].weights[layer, t]))
    st.markdown(f"Router's choice: {was} → forced: **{now}** (the forced expert takes the first slot; the weights "
                "are the router's probabilities of the experts used, renormalised).")
    downstream = [(lay, tok) for lay, tok in res["changed"] if (lay, tok) != (layer, t)]
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(f"**Next-token prediction after token {t}, as routed**")
        predictions_table([x for x, _ in res["top_before"]], [p for _, p in res["top_before"]])
    with c2:
        st.markdown(f"**… with token {t} forced to E{expert} at layer {layer}**")
        predictions_table([x for x, _ in res["top_after"]], [p for _, p in res["top_after"]])
    st.caption(f"Routing that moved elsewhere as a consequence: {len(downstream)} (layer, token) pairs"
               + (": " + ", ".join(f"layer {a} token {b}" for a, b in downstream[:12]) if downstream else "")
               + (" …" if len(downstream) > 12 else "") + ". Only later layers and later tokens can change.")

    # -- specialisation ---------------------------------------------------------------------------------------
    spec = None
    if inp.model.startswith("lecture-") and toggle("Which tokens each expert takes (held-out lecture text)",
                                                  "rt_spec", False):
        spec = state.expert_specialisation(inp.model, SPECIALISATION_N)
        chart(class_share(spec["share"][layer], spec["classes"], spec["uniform"], present=present,
                          title=f"Layer {layer}: share of each token class whose first choice is the expert"),
              key="rt-spec", name="routing-specialisation")
        st.caption(f"{SPECIALISATION_N} held-out examples of the lecture corpus; a column sums to 100%. Red: the "
                   f"expert takes more than its uniform share ({spec['uniform']:.0%}) of that class.")

    rows = [{"layer": lay, "token_index": i, "token": tokens[i], "entropy_bits": float(r.entropy[lay, i]),
             **{f"expert_{s + 1}": int(r.choice[lay, i, s]) for s in range(r.top_k)},
             **{f"weight_{s + 1}": float(r.weights[lay, i, s]) for s in range(r.top_k)}}
            for lay in range(L) for i in range(T)]
    downloads("routing", csv=pd.DataFrame(rows),
              npz={"gates": r.gates, "probs": r.probs, "choice": r.choice, "weights": r.weights,
                   "entropy": r.entropy, "load": r.load, "tokens": tokens},
              json_obj={"model": inp.model, "text": inp.text, "layer": layer, "token": t, "expert": expert,
                        "top_k": r.top_k, "load": r.load, "uniform": r.uniform,
                        "forced": {"before": res["top_before"], "after": res["top_after"],
                                   "changed": res["changed"]},
                        "specialisation": None if spec is None else {k: spec[k] for k in ("classes", "share",
                                                                                          "uniform", "counts")}})
