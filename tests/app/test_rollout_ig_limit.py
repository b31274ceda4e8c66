"""The Rollout page refuses integrated gradients in one line above the size analysis.probes.pass_size allows, and
still shows the other gradient methods."""

from attnlab.analysis.probes import attributions, pass_size
from attnlab.analysis.probes.attributions import ig_refusal
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page, titled

TEXT = "The cat sat on the mat."


def test_rollout_page_refuses_integrated_gradients_above_the_limit(monkeypatch):
    monkeypatch.setattr(pass_size, "IG_MAX_FLOPS", 1.0)  # below one token's work: every text is refused
    at = open_page("rollout", model="random-decoder", text=TEXT, timeout=300)
    ok(at)
    names = list(titled(at, "Which tokens matter for token")["data"][0]["y"])
    assert "input × gradient" in names and "attention × gradient" in names
    assert "integrated gradients" not in names
    lm = load("random-decoder")
    t = lm.encode(TEXT).ids.shape[1]
    caps = [c.value for c in at.caption if c.value.startswith("integrated gradients: not run")]
    assert caps == [f"integrated gradients: {ig_refusal(lm, t)}"]
    assert "beyond T = 0 tokens" in caps[0] and attributions.MAX_STEPS == 512
