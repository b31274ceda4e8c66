"""Every family's forward runs without waiting on its device: a capture (records only, or every hook kept), a
padded batch and a KV-cached step call nothing that copies a tensor to the host or synchronises (.item(),
bool(), .tolist(), .cpu(), int(), nonzero, …: tests/model/syncs.py), so on a GPU the host never stalls inside a
forward. A mixture of experts waits once a layer (its experts' batch sizes come from the routing), and only there."""

from __future__ import annotations

import pytest
import torch
from attnlab.model import hooks
from attnlab.model.cache import KVCache
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G
from tests.model.syncs import Syncs

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sync")
    return {mt: load_hf_folder(G.make(root / mt, mt, cls, **conf)) for mt, (cls, conf) in G.TINY.items()}


def _inputs(lm):
    if lm.reads_image:
        return lm.encode_image((torch.arange(20 * 24 * 3) % 251).to(torch.uint8).view(20, 24, 3).numpy())
    return lm.encode_reading(G.TEXT)


@pytest.mark.parametrize("names", [None, "*"], ids=["records", "every-hook"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type", list(G.TINY))
def test_a_captured_forward_never_waits_on_the_device(models, model_type, backend, names):
    lm = models[model_type]
    inp = _inputs(lm)
    with torch.no_grad(), hooks.capture(names) as cap, Syncs() as syncs:
        lm.model.forward_inputs(inp, backend=backend)
    assert syncs.seen == syncs.allowed(lm.model), syncs.seen
    assert len(cap.sites) >= lm.cfg.n_layers
    if names == "*":
        assert cap.tensors  # the hooks did fire


@pytest.mark.parametrize("model_type", sorted(G.ENCODERS | {"llama", "gpt2", "opt"}))
def test_a_padded_batch_never_waits_on_the_device(models, model_type):
    """Two texts of different lengths in one batch: padding masks (and RoBERTa's positions that skip its padding
    id) are built on the device."""
    lm = models[model_type]
    ids = _inputs(lm).ids[:, :8]  # [1, 8]
    pad = lm.tokenizer.pad_id if getattr(lm.tokenizer, "pad_id", None) is not None else 0
    batch = torch.cat([ids, torch.cat([ids[:, :5], torch.full((1, 3), pad)], 1)])  # [2, 8]
    attention_mask = torch.ones_like(batch, dtype=torch.bool)
    attention_mask[1, 5:] = False
    with torch.no_grad(), hooks.capture() as cap, Syncs() as syncs:
        out = lm.model(batch, attention_mask=attention_mask, backend="sdpa")
    assert syncs.seen == [], syncs.seen
    p = cap[cap.sites[0]].pattern(batch=1)  # [H, 8, 8]: the padded row's queries put nothing on the padding
    assert p.shape[1:] == (8, 8) and float(p[:, :5, 5:].sum()) == 0.0
    assert abs(p[:, :5].sum(-1) - 1).max() < 1e-5 and out.hidden.shape[:2] == (2, 8)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "gemma2", "mistral", "gpt_neox", "opt", "phi3"])
def test_a_cached_step_never_waits_on_the_device(models, model_type):
    lm = models[model_type]
    ids = _inputs(lm).ids[:, :6]  # [1, 6]
    cache = KVCache()
    with torch.no_grad():
        lm.model(ids[:, :5], cache=cache, backend="sdpa")
        with hooks.capture() as cap, Syncs() as syncs:
            lm.model(ids[:, 5:], cache=cache, backend="sdpa")
    assert syncs.seen == [], syncs.seen
    assert cap[cap.sites[0]].k_len == 6
