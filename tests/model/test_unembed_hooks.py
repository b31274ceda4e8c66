"""TransformerLens's unembed.hook_in [B, T, D] (the final normed stream the head reads) and unembed.hook_out
[B, T, V] (the logits): equal to transformers' last hidden state and logits, fired only when touched, and an
intervention on either changes the returned logits exactly as the same change made by hand."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.hooks import capture
from attnlab.model.parity import load_transformers

from tests.family_grid import TINY, make
from tests.model.helpers import tiny, tokens

TEXT = "the cat sat on the mat because the mat was warm"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_unembed_hooks_equal_transformers_last_hidden_state_and_logits(tmp_path, family):
    cls, conf = TINY[family]
    lm = load_hf_folder(make(tmp_path, family, cls, **conf))
    hf = load_transformers(lm)
    ids = lm.encode(TEXT).ids
    with torch.no_grad():
        out = hf(ids, output_hidden_states=True)
    logits, cache = lm.run_with_cache(ids, names=["unembed.hook_in", "unembed.hook_out"])
    T, D, V = ids.shape[1], lm.cfg.d_model, lm.cfg.vocab_size
    assert cache["unembed.hook_in"].shape == (1, T, D) and cache["unembed.hook_out"].shape == (1, T, V)
    torch.testing.assert_close(cache["unembed.hook_in"], out.hidden_states[-1], rtol=0, atol=1e-5)
    torch.testing.assert_close(cache["unembed.hook_out"], out.logits, rtol=0, atol=1e-5)
    assert torch.equal(cache["unembed.hook_out"], logits)


def test_patched_hook_out_and_hook_in_change_the_logits_exactly():
    m = tiny(n_layers=2)
    x = tokens(7, B=2)
    with torch.no_grad():
        plain = m(x)
        bump = torch.zeros(m.cfg.vocab_size)
        bump[3] = 5.0
        with capture(interventions={"unembed.hook_out": lambda t, _n: t + bump}, records=False):
            out = m(x).logits
        assert torch.equal(out, plain.logits + bump)
        h2 = plain.hidden * 2
        with capture(interventions={"unembed.hook_in": lambda t, _n: t * 2}, records=False):
            out = m(x).logits
        torch.testing.assert_close(out, m.lm_head(h2), rtol=0, atol=0)


def test_unembed_hooks_fire_only_when_touched_and_are_listed(monkeypatch):
    m = tiny(n_layers=1)
    assert m.hook_names()[-2:] == ["unembed.hook_in", "unembed.hook_out"]
    with torch.no_grad(), capture() as cap:
        m(tokens(5))
    assert cap.tensors == {}
    with torch.no_grad(), capture(names="blocks.0.hook_resid_post") as cap:
        m(tokens(5))
    assert list(cap.tensors) == ["blocks.0.hook_resid_post"]
    ed = tiny("encdec")
    assert ed.hook_names()[-2:] == ["decoder.unembed.hook_in", "decoder.unembed.hook_out"]
    assert not any("unembed" in n for n in tiny("encoder").hook_names())


def test_softcap_comes_after_hook_out():
    m = tiny(n_layers=1, logit_softcap=3.0)
    with torch.no_grad(), capture(names="unembed.hook_out") as cap:
        out = m(tokens(5)).logits
    raw = cap.tensor("unembed.hook_out")
    assert raw.abs().max() > 0 and torch.equal(out, torch.tanh(raw / 3.0) * 3.0)
