"""The model's readout as its own methods (model/readout.py): the residual stream's names, its logits, running it
onward from any block, and the input embeddings — each checked against the one forward pass."""

from __future__ import annotations

import attnlab.model as model
import pytest
import torch
from attnlab.model.inputs import InputError
from attnlab.model.readout import Readout

from tests.model.test_vit import vit_lm
from tests.view.fixtures import make_view_model


@pytest.fixture(scope="module")
def dec():
    return model.load("random-decoder")


@pytest.fixture(scope="module")
def captured(dec):
    """(readout, inputs, every resid hook [1, T, D], the model's logits [1, T, V])."""
    ro = dec.readout()
    inp = dec.encode("the cat sat on the mat")
    with torch.no_grad():
        fwd = dec.forward(inp, names=ro.resid_names, records=False)
    return ro, inp, [fwd.capture.tensor(n) for n in ro.resid_names], fwd.logits


def test_resid_names_are_one_per_block_and_the_end(dec, captured):
    ro = captured[0]
    assert isinstance(ro, Readout) and ro.n_blocks == dec.n_blocks == dec.cfg.n_layers
    assert ro.resid_names == [f"blocks.{i}.hook_resid_pre" for i in range(ro.n_blocks)] + [
        f"blocks.{ro.n_blocks - 1}.hook_resid_post"]
    assert ro.block_hooks("attn.hook_z") == [f"blocks.{i}.attn.hook_z" for i in range(ro.n_blocks)]
    assert set(ro.block_hooks("hook_mlp_out")) <= set(dec.model.hook_names())


def test_logits_of_the_final_stream_are_the_models(captured):
    ro, _, resid, logits = captured
    with torch.no_grad():
        assert torch.equal(ro.logits(resid[-1]), logits)


@pytest.mark.parametrize("layer", [0, 1, -1])
def test_run_from_any_block_reaches_the_final_stream(captured, layer):
    ro, _, resid, _ = captured
    layer = layer % ro.n_blocks
    with torch.no_grad():
        out = ro.run_from(layer, resid[layer])  # [1, T, D]
        one = ro.run_from(layer, resid[layer], layer + 1)
    torch.testing.assert_close(out, resid[-1], rtol=0, atol=1e-5)
    torch.testing.assert_close(one, resid[layer + 1], rtol=0, atol=1e-5)
    assert out.shape == resid[0].shape


def test_run_from_applies_interventions_and_batches(captured):
    ro, _, resid, _ = captured
    x = torch.cat([resid[0], resid[0]])  # [2, T, D]: two runs at once
    zero_all = {n: (lambda z, name: torch.zeros_like(z)) for n in ro.block_hooks("attn.hook_z")}
    with torch.no_grad():
        plain = ro.run_from(0, x)
        ablated = ro.run_from(0, x, interventions=zero_all)
    torch.testing.assert_close(plain[1:], resid[-1], rtol=0, atol=1e-5)
    assert (ablated - plain).abs().max() > 1e-3  # every head's output zeroed changes the stream


def test_run_from_refuses_blocks_out_of_range(captured):
    ro, _, resid, _ = captured
    with pytest.raises(InputError, match=f"this model has blocks 0–{ro.n_blocks - 1}"):
        ro.run_from(0, resid[0], ro.n_blocks + 1)


def test_embed_modules_name_each_stack_that_reads_tokens(dec, tmp_path):
    assert dec.embed_modules() == {"hook_embed": dec.model.embed}
    ed = model.load("random-encdec")
    assert ed.embed_modules() == {"encoder.hook_embed": ed.model.encoder.embed,
                                  "decoder.hook_embed": ed.model.decoder.embed}
    view = model.load(str(make_view_model("gptj", tmp_path / "gptj", seed=0)))
    with pytest.raises(InputError, match="input embeddings' hooks needs a converted family"):
        view.embed_modules()
    with pytest.raises(InputError, match="vision transformer without a token head"):
        vit_lm().readout()
