"""lm(input, return_type=...) as TransformerLens's model(...): the logits of a forward, the next-token loss equal to
transformers' own `labels=` loss (each side tokenizing for itself), per token, both, or None; run_with_hooks returns
the same kinds; refusals in one line."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.parity import load_transformers
from attnlab.model.registry import load

from tests.family_grid import TINY, make

TEXT = "the cat sat on the mat because the mat was warm"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    cls, conf = TINY["llama"]
    folder = make(tmp_path_factory.mktemp("llama"), "llama", cls, **conf)
    lm = load_hf_folder(folder)
    return lm, load_transformers(lm), folder


def test_call_gives_the_forwards_logits_and_transformers_loss(llama):
    import transformers

    lm, hf, folder = llama
    ids = lm.to_tokens(TEXT)  # [1, T]
    logits = lm(ids)
    assert torch.equal(logits, lm.forward(lm.encode(TEXT), records=False).logits)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)(TEXT, return_tensors="pt").input_ids
    assert torch.equal(theirs, ids)  # each side tokenized for itself
    with torch.no_grad():
        ref = hf(theirs, labels=theirs).loss  # transformers shifts the labels: the mean next-token loss
    loss = lm(TEXT, return_type="loss")
    assert loss.shape == () and abs(float(loss) - float(ref)) < 1e-5 and float(loss) > 0.1
    per = lm(ids, return_type="loss", loss_per_token=True)
    assert per.shape == (1, ids.shape[1] - 1) and torch.allclose(per.mean(), loss, atol=1e-6)
    want = -torch.log_softmax(logits[0, 2].float(), -1)[ids[0, 3]]  # position 2 predicts token 3
    assert torch.allclose(per[0, 2], want, atol=1e-6)
    both = lm(ids, return_type="both")
    assert torch.equal(both[0], logits) and torch.equal(both[1], loss)
    assert lm(ids, return_type=None) is None


def test_run_with_hooks_returns_the_loss_of_the_hooked_run(llama):
    lm, _, _ = llama
    ids = lm.to_tokens(TEXT)

    def ablate(z, hook):  # head 0 of layer 0 zeroed, in place
        z[:, :, 0] = 0.0

    logits = lm.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_z", ablate)])
    loss = lm.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_z", ablate)], return_type="loss")
    ref = torch.nn.functional.cross_entropy(logits[0, :-1].float(), ids[0, 1:])
    assert abs(float(loss) - float(ref)) < 1e-6
    assert abs(float(loss) - float(lm(ids, return_type="loss"))) > 1e-6  # the hook changed it


@pytest.mark.parametrize("model, given, said", [
    ("lecture-encoder", {"return_type": "loss"}, "next-token loss of a decoder language model; lecture-encoder is an encoder"),
    ("lecture-decoder", {"return_type": "logprobs"}, "return_type 'logprobs': choose one of 'logits', 'loss', 'both', None"),
])
def test_refusals_are_one_line(model, given, said):
    lm = load(model)
    with pytest.raises(InputError) as e:
        lm("the cat sat", **given)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_one_token_loss_is_refused(llama):
    lm, _, _ = llama
    with pytest.raises(InputError, match="at least 2 tokens, not 1"):
        lm(torch.tensor([[5]]), return_type="loss")
