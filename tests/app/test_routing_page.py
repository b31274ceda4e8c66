"""The Routing page (/routing) with AppTest: a session on a dense model gets lecture-moe and a clear message,
each option (layer, token, expert, the specialisation table) redraws with the numbers computed here, the
intervention's tables equal analysis.probes.routing's, token labels are escaped, the URL keeps the view."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.probes.routing import force_expert_run, route_text
from attnlab.app.presets import default_query, presets
from attnlab.model.registry import load

from tests.app.conftest import arr, ok, open_page, titled, z_of

MODEL = "lecture-moe"


@pytest.fixture(scope="module")
def lm():
    return load(MODEL)


def _text(p):
    return presets(MODEL)[p].text


def test_a_dense_model_gets_lecture_moe_and_says_so(lm):
    at = open_page("routing", model="lecture-decoder")
    ok(at)
    assert any("lecture-decoder** has no mixture-of-experts layers" in i.value and "lecture-moe" in i.value
               for i in at.info)
    assert at.session_state["model"] == "lecture-decoder"  # the session keeps its model
    right = []  # the samples lecture-moe answers right: the demo opens on the first of them
    for p in presets(MODEL):
        run = lm.run(p.text)
        right.append(p.answer is not None and run.top_tokens[default_query(run, p)][0].strip() == p.answer.strip())
    assert any(right)
    demo = presets(MODEL)[right.index(True)]
    assert any(f"“{demo.title}”" in i.value for i in at.info)
    r, _ = route_text(lm, lm.encode(demo.text))
    t = len(r.tokens) - 1
    expert = int(at.query_params["rt_expert"])  # the default: an expert outside the token's top-k
    assert expert not in set(r.choice[0, t].tolist())
    before, after = at.dataframe[1].value, at.dataframe[2].value
    assert not np.allclose(before["probability"], after["probability"])  # forcing changes the prediction
    assert "lecture-decoder's tasks" in demo.note and "lecture-moe was upcycled" in demo.note
    fig = titled(at, "Layer 0: router weight per token and expert")
    np.testing.assert_allclose(z_of(fig["data"][0]), r.gates[0], atol=1e-6)
    assert list(fig["layout"]["xaxis"]["ticktext"]) == ["E0", "E1", "E2", "E3"]
    assert fig["layout"]["yaxis"]["ticktext"][0] == "0 [BOS]"
    assert at.query_params["rt_layer"] == "0" and len(at.get("download_button")) == 3


def test_layer_token_and_expert_options_redraw_with_the_routing(lm):
    text = _text(4)  # an induction sample
    at = open_page("routing", model=MODEL, preset=presets(MODEL)[4].id, rt_layer=2, query=5, rt_expert=1)
    ok(at)
    inp = lm.encode(text)
    r, _ = route_text(lm, inp)
    fig = titled(at, "Layer 2: router weight per token and expert")
    np.testing.assert_allclose(z_of(fig["data"][0]), r.gates[2], atol=1e-6)
    load_fig = titled(at, "Expert load per layer")
    bars = [tr for tr in load_fig["data"] if tr["type"] == "bar"]
    assert len(bars) == r.load.shape[1]
    for e, tr in enumerate(bars):
        np.testing.assert_allclose(arr(tr["y"]), r.load[:, e], atol=1e-6)
    (even,) = [tr for tr in load_fig["data"] if tr["type"] == "scatter"]  # the uniform share: in the legend
    assert even["name"] == f"uniform {r.uniform:.3g}" and np.allclose(arr(even["y"]), r.uniform)
    ent = titled(at, "Router entropy per token")
    np.testing.assert_allclose(arr(ent["data"][2]["y"]), r.entropy[2], atol=1e-5)
    table = at.dataframe[0].value
    assert list(table["choice 1"]) == [f"E{e} ({w:.2f})" for e, w in zip(r.choice[2, :, 0], r.weights[2, :, 0])]
    res = force_expert_run(lm, inp, 2, 5, 1)
    before, after = at.dataframe[1].value, at.dataframe[2].value
    assert list(before["token"]) == [t for t, _ in res["top_before"]]
    assert list(after["token"]) == [t for t, _ in res["top_after"]]
    np.testing.assert_allclose(after["probability"], [p for _, p in res["top_after"]], rtol=1e-6)
    assert "Force token 5" in " ".join(h.value for h in at.subheader)
    assert any("forced: **E1" in m.value for m in at.markdown)
    assert (at.query_params["rt_layer"], at.query_params["query"], at.query_params["rt_expert"]) == ("2", "5", "1")


def test_widgets_change_the_view(lm):
    at = open_page("routing", model=MODEL)
    ok(at)
    at.segmented_control(key="rt_layer").set_value(3).run()
    ok(at)
    assert titled(at, "Layer 3: router weight per token and expert")
    at.selectbox(key="rt_expert").set_value(0).run()
    ok(at)
    assert any("to E0 at layer 3" in h.value for h in at.subheader)
    at.selectbox(key="query").set_value(2).run()
    ok(at)
    assert any(h.value.startswith("Force token 2") for h in at.subheader)
    at.toggle(key="rt_spec").set_value(True).run()
    ok(at)
    fig = titled(at, "Layer 3: share of each token class")
    assert "number words" in fig["layout"]["xaxis"]["ticktext"]
    assert np.asarray(z_of(fig["data"][0])).shape == (4, len(fig["layout"]["xaxis"]["ticktext"]))
    assert at.query_params["rt_spec"] == "1"


def test_figures_escape_token_labels_on_integer_axes():
    from attnlab.app.figures.routing import entropy_lines, gate_heatmap

    tokens = ["[BOS]", "<b>", "a&b"]
    fig = gate_heatmap(np.eye(3, 4, dtype=np.float32), tokens, chosen=np.array([[0, 1], [1, 0], [2, 3]]))
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2]
    assert list(fig.layout.yaxis.ticktext) == ["0 [BOS]", "1 &lt;b&gt;", "2 a&amp;b"]
    assert "(choice 1)" in fig.data[0].text[1][1] and "(not chosen)" in fig.data[0].text[1][3]
    lines = entropy_lines(np.zeros((2, 3), np.float32), tokens, 2.0)
    assert list(lines.layout.xaxis.ticktext) == ["0 [BOS]", "1 &lt;b&gt;", "2 a&amp;b"] and len(lines.data) == 3
    assert lines.data[2].name == "uniform: 2 bits" and list(lines.data[2].y) == [2.0, 2.0]
