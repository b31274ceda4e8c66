"""Circuit (/circuit): which edges between heads, MLPs, the embeddings and the logits carry the answer — edge
attribution patching (EAP) or EAP-IG scores every edge, and the circuit of the top edges is run alone (every other
edge carrying its corrupted value) to see how much of the logit difference it keeps."""

import streamlit as st
from attnlab.analysis.circuit.names import card_roles, type_roles
from attnlab.app import job_entries, state
from attnlab.app.circuit_examples import EXAMPLES
from attnlab.app.downloads import downloads
from attnlab.app.figures.circuit import MAX_DRAWN, circuit_graph, faithfulness_curve
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import require
from attnlab.app.job_view import job_result
from attnlab.app.prompt_pair import prompt_pair
from attnlab.app.url_state import select, slider

METHODS = {"eap-ig": "EAP-IG (10 gradients from corrupted to clean)", "eap": "EAP (one gradient, on the clean run)",
           "eap-ig-act": "EAP-IG over activations (each layer's heads and MLP on their own path; slower)"}

with page("Circuit", "Which heads and edges carry the answer?"):
    inp = require(("internals",), "runs the model with each head's inputs apart")
    present = presenting()
    st.markdown(
        "Every head and MLP writes into the residual stream, and every head (through its query, key and value) and "
        "MLP reads from it: an **edge** joins a writer to a later reader. Corrupting one edge means that reader gets "
        "the writer's output from the **corrupted** prompt. Edge attribution patching estimates, for every edge at "
        "once, how much that changes *logit(answer) − logit(wrong)*; the **circuit** of the top edges is then run "
        "alone — every other edge corrupted — to measure the share of the logit difference it keeps.")
    model, clean, corrupt, answer, wrong, ex = prompt_pair(EXAMPLES, inp, "ci", lambda e: e.note)
    c1, c2 = st.columns(2)
    with c1:
        method = select("Method", list(METHODS), "ci_method", "eap-ig", format_func=METHODS.get)
    with c2:
        share = slider("Circuit size (% of the edges)", 0.5, 20.0, "ci_share", 5.0, step=0.5)
    c = job_result(lambda again: job_entries.circuit_job(model, clean, corrupt, answer, wrong, method, share / 100, again),
                   "Scoring every edge and running the circuits", "ci-job")
    roles = card_roles(state.model_card(model)) or type_roles(state.head_table(model, clean)[0])
    st.markdown(f"logit({md(c.answer)}) − logit({md(c.wrong)}): **{c.m_clean:+.3f}** clean, **{c.m_corrupt:+.3f}** "
                f"corrupted. The circuit of the top **{c.n_edges:,}** of {c.n_edges_total:,} edges keeps "
                f"**{100 * c.faithfulness:.1f} %** of the difference ({c.method}, {c.seconds['total']:.1f} s).")
    drawn = min(c.n_edges, MAX_DRAWN)
    chart(circuit_graph(c, roles, present=present, title=f"the top {drawn:,} edges" + (
        f" of the circuit's {c.n_edges:,}" if drawn < c.n_edges else "")), key="ci-graph", name="circuit-graph")
    st.caption("Blue edges support the answer (corrupting them lowers the logit difference), red ones work against "
               "it; width grows with |score|. Each head's q, k and v inputs sit just under it (left to right); "
               "orange heads are named by the model card (or, without one, by their measured head type).")
    chart(faithfulness_curve(c.curve, c.n_edges, present=present,
                             title="the share of the logit difference the top-n circuit keeps"),
          key="ci-curve", name="circuit-faithfulness")
    named = [f"{h.removeprefix('blocks.').replace('.attn.head.', '.')} ({', '.join(roles[h])})"
             for h in c.circuit_heads() if h in roles]
    if named:
        st.markdown("Named heads in the circuit: " + ", ".join(named) + ".")
    if ex is not None and ex.note:
        st.info(ex.note)
    downloads("circuit", json_obj=c.to_json())
