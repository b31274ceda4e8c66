"""The Rollout page's gradient attributions (input × gradient, integrated gradients, attention × gradient) for one
text, in the held-out table, and the explanation of the ranking written from the measured numbers."""

import numpy as np
import pytest
from attnlab.analysis.faithfulness.cases import make_cases
from attnlab.analysis.faithfulness.why import ranking_reasons
from attnlab.analysis.probes.attributions import attention_x_gradient, input_x_gradient
from attnlab.app.presets import presets
from attnlab.model.registry import load

from tests.app.conftest import finish_jobs, ok, open_page, titled, z_of

N = 20


def test_rollout_page_shows_gradient_rows_and_explains_the_ranking():
    lm = load("lecture-decoder")
    p = next(p for p in presets("lecture-decoder") if p.answer and "retrieval" in p.id)
    at = open_page("rollout", model="lecture-decoder", preset=p.id, faith_n=N, timeout=600)
    ok(at)
    if [b for b in at.button if b.key == "faith_ig"]:  # integrated gradients not kept yet: score it (app.held_out)
        finish_jobs(at.button(key="faith_ig").click().run())
    q = at.session_state["query"]
    fig = titled(at, f"Which tokens matter for token {q}")
    names = list(fig["data"][0]["y"])
    assert names[-3:] == ["input × gradient", "integrated gradients", "attention × gradient"]
    values = z_of({"z": fig["data"][0]["customdata"]})  # [methods, T]
    inputs = lm.encode(p.text)
    np.testing.assert_allclose(values[names.index("input × gradient")], input_x_gradient(lm, inputs, q).row,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values[names.index("attention × gradient")], attention_x_gradient(lm, inputs, q).row,
                               rtol=1e-4, atol=1e-5)
    ig_caption = next(c.value for c in at.caption if c.value.startswith("Integrated gradients (Sundararajan"))
    assert "Baseline: every non-special token replaced by `[PAD]`; " in ig_caption and " steps." in ig_caption
    err = float(ig_caption.split("off from the difference by ")[1].split("%")[0])
    assert err <= 1.0

    table = next(d.value for d in at.dataframe if "attnlab name" in d.value.columns)
    assert list(table["attnlab name"])[-3:] == ["input_x_gradient", "integrated_gradients", "attention_x_gradient"]
    held = next(c.value for c in at.caption if c.value.startswith("Integrated gradients over these examples"))
    assert "baseline every non-special token replaced by `[PAD]`" in held

    reasons = ranking_reasons(lm, make_cases(lm, N, 0))
    lines = [m.value for m in at.markdown if m.value.startswith("- ")]
    assert len(lines) == 3 and lines[0].startswith("- Ranking on these examples: last-layer attention")
    lk = reasons["lookup"]
    assert f"layer {lk['layer']} head {lk['head']}" in lines[1] and f"{lk['weight']:.2f}" in lines[1]
    assert f"its row puts {reasons['rollout_source']:.2f} on the source" in lines[2]
    top = dict(zip(table["attnlab name"], table["top-1 agreement"]))
    assert reasons["top1"]["last_layer"] == pytest.approx(top["last_layer"])
    assert reasons["top1"]["rollout"] == pytest.approx(top["rollout"])
    assert top["last_layer"] > top["rollout"]  # the ranking the explanation is about
