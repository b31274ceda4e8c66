"""One contract for a loaded model: LoadedModel and ViewModel both satisfy LoadedModelLike, and their capabilities
are one frozen type whose fields say what each kind of model can do."""

from __future__ import annotations

import dataclasses

import attnlab.model as model
import pytest
import torch
from attnlab.model.capabilities import Capabilities
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.protocol import LoadedModelLike
from attnlab.model.view import ViewModel

from tests.model.test_vit import vit_lm
from tests.view.fixtures import make_view_model

# (converted, has_qk, has_cache, generates, interventions, masks, internals, relevance, reads_source, reads_image,
#  has_logits, causal, next_token) of each kind of model
WANT = {
    "random-decoder": (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1),
    "random-encoder": (1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 0),
    "random-encdec": (1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0),
    "tiny-vit": (1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0),
    "gptj": (0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1),
    "mobilebert": (0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0),
    "pegasus": (0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocol")
    out = {n: model.load(n) for n in ("random-decoder", "random-encoder", "random-encdec")}
    out["tiny-vit"] = vit_lm()
    out |= {f: model.load(str(make_view_model(f, root / f, seed=i))) for i, f in
            enumerate(("gptj", "mobilebert", "pegasus"))}
    return out


def members() -> list[str]:
    """Every attribute, property and method the Protocol declares."""
    names = set(getattr(LoadedModelLike, "__annotations__", {}))
    names |= {k for k in vars(LoadedModelLike) if not k.startswith("_")}
    return sorted(names)


def test_both_kinds_satisfy_the_protocol(models):
    assert len(members()) >= 40
    for name, lm in models.items():
        assert isinstance(lm, LoadedModelLike), name
        missing = [m for m in members() if not hasattr(lm, m)]
        assert missing == [], f"{name} lacks {missing}"
    for cls in (LoadedModel, ViewModel):  # methods and properties on the class itself, fields on the instances
        on_class = [m for m in members() if m not in LoadedModelLike.__annotations__]
        assert [m for m in on_class if not hasattr(cls, m)] == [], cls.__name__
    assert {type(lm) for lm in models.values()} == {LoadedModel, ViewModel}


@pytest.mark.parametrize("name", list(WANT))
def test_capabilities_are_one_frozen_type(models, name):
    can = models[name].capabilities
    assert type(can) is Capabilities
    assert tuple(int(getattr(can, f)) for f in Capabilities.names()) == WANT[name]
    assert can.as_dict() == dict(zip(Capabilities.names(), map(bool, WANT[name])))
    assert models[name].describe()["can"] == can
    with pytest.raises(dataclasses.FrozenInstanceError):
        can.internals = not can.internals
    lm = models[name]  # the capabilities and the model's own properties say the same
    assert (can.reads_source, can.reads_image, can.causal, can.next_token) == \
        (lm.reads_source, lm.reads_image, lm.is_causal, lm.predicts_next_token)


def test_every_capability_has_a_docstring():
    assert len(Capabilities.names()) == 13
    text = open(model.capabilities.__file__).read()
    for f in Capabilities.names():
        after = text.split(f"    {f}: bool\n", 1)[1].lstrip()
        assert after.startswith('"""') and len(after.split('"""')[1]) > 15, f


def test_an_unknown_capability_fails_loudly():
    assert Capabilities.check(("internals", "has_qk")) == ("internals", "has_qk")
    assert Capabilities.check("masks") == ("masks",)
    with pytest.raises(ValueError, match="unknown capability 'internal'; capabilities are converted, has_qk"):
        Capabilities.check(("masks", "internal"))


def test_readout_is_the_models_own(models):
    dec = models["random-decoder"]
    stack, head = dec.readout(need_linear=True)
    assert stack is dec.model and head is dec.model.lm_head
    ed = models["random-encdec"]
    assert ed.readout() == (ed.model.decoder, ed.model.decoder.lm_head)
    enc = models["random-encoder"]
    if enc.model.mlm is not None:
        assert enc.readout() == (enc.model, enc.model.mlm)
    with pytest.raises(InputError, match="an encoder without a linear unembedding"):
        enc.readout(need_linear=True)
    with pytest.raises(InputError, match="tiny-vit is a vision transformer without a token head"):
        models["tiny-vit"].readout()
    with pytest.raises(InputError, match="transformers view: its residual stream and unembedding needs a converted"):
        models["gptj"].readout()
    inp = dec.encode("the cat sat")
    fwd = dec.forward(inp, records=False)
    stack, head = dec.readout()
    # hidden [1, T, D] is the final-normed stream: the head maps it to the logits the model computes
    torch.testing.assert_close(head(fwd.hidden), fwd.logits, rtol=0, atol=1e-5)


def test_block_and_site_counts(models):
    for name, lm in models.items():
        run = lm.run(inputs=lm.encode_image(__import__("tests.model.test_vit", fromlist=["IMAGE"]).IMAGE)) \
            if lm.reads_image else lm.run("the cat sat", "a dog ran" if lm.reads_source else None)
        assert len(run.records) == lm.n_sites, name
        layers = lm.cfg.n_layers + (lm.cfg.dec_layers if lm.reads_source else 0)
        assert lm.n_blocks == layers, name


OBJECTIVE = {"random-decoder": "causal", "random-encoder": "masked", "random-encdec": "seq2seq", "tiny-vit": "classify",
             "gptj": "causal", "mobilebert": "masked", "pegasus": "seq2seq"}


def test_the_objective_is_the_models_own(models):
    """lm.objective (what lecture/ keys its tables by) agrees with the capabilities and with a converted config's."""
    assert {name: lm.objective for name, lm in models.items()} == OBJECTIVE
    for name, lm in models.items():
        assert (lm.objective == "causal") == lm.predicts_next_token, name
        assert (lm.objective == "seq2seq") == lm.reads_source, name
        assert (lm.objective == "classify") == lm.reads_image, name
        if lm.capabilities.converted:
            assert lm.cfg.objective == lm.objective, name
