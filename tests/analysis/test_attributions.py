"""Gradient attributions (analysis/probes/attributions.py) against independent references, IG completeness, and their
faithfulness rows on lecture-decoder's retrieval examples."""

import numpy as np
import pytest
import torch
from attnlab.analysis.faithfulness.benchmark import faithfulness
from attnlab.analysis.faithfulness.cases import make_cases
from attnlab.analysis.probes.attributions import (
    MAX_STEPS,
    attention_x_gradient,
    input_x_gradient,
    integrated_gradients,
)
from attnlab.analysis.probes.ig_baseline import baseline_ids
from attnlab.model import hooks
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.analysis.test_relevance import encode, tiny

GRAD_METHODS = ["input_x_gradient", "integrated_gradients", "attention_x_gradient"]


class _Scaled(torch.nn.Module):
    """An embedding whose row at position i is scaled by s: y(e with e_i → s·e_i), for finite differences."""

    def __init__(self, inner, i, s):
        super().__init__()
        self.inner, self.i, self.s = inner, i, s

    def forward(self, ids):
        x = self.inner(ids).clone()
        x[:, self.i] *= self.s
        return x


def logit_with_scaled_token(lm, inputs, stack, i, s, pos, tid):
    embed = stack.embed
    inner = embed.tok
    embed.tok = _Scaled(inner, i, s)
    try:
        with torch.no_grad():
            out = lm.model(inputs.src_ids, inputs.ids) if lm.arch == "encdec" else lm.model(inputs.ids)
    finally:
        embed.tok = inner
    return float(out.logits[0, pos, tid])


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encdec"])
def test_input_x_gradient_is_the_derivative_of_scaling_each_token(arch):
    """e_i · ∂y/∂e_i = d/ds y(s · e_i) at s = 1: central differences on a float64 model."""
    lm = tiny(arch, 2)
    inp = encode(lm)
    pos, tid = 3, 7
    a = input_x_gradient(lm, inp, pos, tid)
    h = 1e-5
    stacks = [(lm.model.decoder, a.row), (lm.model.encoder, a.source_row)] if arch == "encdec" else [(lm.model, a.row)]
    for stack, row in stacks:
        ref = [(logit_with_scaled_token(lm, inp, stack, i, 1 + h, pos, tid)
                - logit_with_scaled_token(lm, inp, stack, i, 1 - h, pos, tid)) / (2 * h) for i in range(len(row))]
        np.testing.assert_allclose(row, ref, rtol=1e-6, atol=1e-8)
    assert a.logit == pytest.approx(logit_with_scaled_token(lm, inp, stacks[0][0], 0, 1.0, pos, tid), abs=1e-10)
    if arch == "decoder":
        assert np.all(a.row[pos + 1:] == 0)  # causal: later tokens do not move an earlier logit


def attention_x_gradient_by_leaves(lm, inputs, pos, tid):
    """Σ over sites, heads and rows of A ⊙ ∂y/∂A, each site's gradient from its own leaf-patched run."""
    def fwd():
        return lm.model(inputs.src_ids, inputs.ids) if lm.arch == "encdec" else lm.model(inputs.ids)

    with torch.no_grad(), hooks.capture(names="*.hook_pattern") as cap:
        fwd()
    target, source = np.zeros(inputs.ids.shape[1]), np.zeros(0 if inputs.src_ids is None else inputs.src_ids.shape[1])
    for name, (value,) in cap.tensors.items():
        leaf = value.clone().requires_grad_(True)
        with torch.enable_grad(), hooks.intervene({name: hooks.replace_with(leaf)}):
            fwd().logits[0, pos, tid].backward()
        per_key = (leaf * leaf.grad).detach()[0].sum((0, 1)).numpy()  # [H, q, k] -> [k]
        if "cross_attn" in name or name.startswith("encoder."):
            source += per_key
        else:
            target += per_key
    return target, source


@pytest.mark.parametrize("arch", ["decoder", "encdec"])
def test_attention_x_gradient_equals_leaf_patched_gradients(arch):
    lm = tiny(arch, 2)
    inp = encode(lm)
    a = attention_x_gradient(lm, inp, 4, 11)
    target, source = attention_x_gradient_by_leaves(lm, inp, 4, 11)
    np.testing.assert_allclose(a.row, target, rtol=1e-9, atol=1e-12)
    if arch == "encdec":
        np.testing.assert_allclose(a.source_row, source, rtol=1e-9, atol=1e-12)
    assert np.abs(a.row).sum() > 1e-3  # not trivially zero


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encdec"])
def test_integrated_gradients_is_complete_on_a_tiny_model(arch):
    lm = tiny(arch, 2)
    inp = encode(lm)
    ig = integrated_gradients(lm, inp, 3)
    assert ig.completeness_error <= 0.01
    assert ig.total == pytest.approx(ig.logit - ig.baseline_logit, rel=0.01)
    assert 8 <= ig.steps <= MAX_STEPS and ig.rows == ig.steps + 1
    assert ig.baseline == "every non-special token replaced by [PAD]"
    assert ig.row[0] == 0.0  # [BOS] is kept in the baseline: e − b = 0
    with pytest.raises(InputError, match="multiple of 2"):
        integrated_gradients(lm, inp, 3, steps=31)
    with pytest.raises(InputError, match="outside"):
        integrated_gradients(lm, inp, 99)


def test_integrated_gradients_is_complete_within_1pct_on_lecture_decoder():
    lm = load("lecture-decoder")
    cases = make_cases(lm, 6, seed=0)
    retrieval = [c for c in make_cases(lm, 40, seed=0) if c.example.task == "retrieval"][:2]
    for c in cases[:2] + retrieval:
        ig = integrated_gradients(lm, c.inputs, c.query, c.answer_id)
        assert ig.completeness_error <= 0.01, (c.example.task, ig.steps, ig.completeness_error)
        assert 8 <= ig.steps <= MAX_STEPS and ig.rows == ig.steps + 1
        assert ig.baseline == "every non-special token replaced by [PAD]"
        assert abs(ig.total - (ig.logit - ig.baseline_logit)) <= 0.01 * abs(ig.logit - ig.baseline_logit)
        assert ig.row[c.query + 1:].tolist() == [0.0] * (len(ig.row) - c.query - 1)
    base = baseline_ids(lm, cases[0].inputs)["hook_embed"][0]
    tok = lm.tokenizer
    ids = cases[0].inputs.ids[0]
    assert base[0] == tok.bos_id == ids[0] and set(base[1:].tolist()) <= {tok.pad_id, tok.eos_id}


def test_gradient_methods_judged_on_lecture_decoder_retrieval():
    lm = load("lecture-decoder")
    cases = [c for c in make_cases(lm, 30, seed=0) if c.example.task == "retrieval"][:6]
    rep = faithfulness(lm, cases=cases, methods=("last_layer", "rollout", *GRAD_METHODS), ablation=False)
    top = {m: v["top1"] for m, v in rep["methods"].items()}
    assert [v["n"] for v in rep["methods"].values()] == [6] * 5
    # the round-three decoder: its last layer's lookup head finds every fact; gradients credit other tokens as often
    assert top == pytest.approx({"last_layer": 6 / 6, "rollout": 4 / 6, "input_x_gradient": 4 / 6,
                                 "integrated_gradients": 2 / 6, "attention_x_gradient": 2 / 6}), top
    ig = rep["integrated_gradients"]
    assert len(ig["examples"]) == 6 and ig["max_error"] <= 0.01
    assert ig["baseline"] == "every non-special token replaced by [PAD]"
    assert all(e["steps"] >= 8 and e["logit"] > e["baseline_logit"] for e in ig["examples"])
    assert [e["rows"] for e in ig["examples"]] == [e["steps"] + 1 for e in ig["examples"]]  # each row run once
    assert ig["mean_rows"] == pytest.approx(np.mean([e["rows"] for e in ig["examples"]]))


def test_ig_baseline_keeps_cls_and_sep_of_a_bert_tokenizer():
    """MiniLM's tokenizer names no BOS/EOS: its [CLS] and [SEP] were replaced by [PAD] in the baseline (ids
    [0, 0, 0, 103, 0, 0]) although the baseline keeps every special token; [UNK] stands for a word and goes."""
    lm = load("minilm")
    inputs = lm.encode("the cat [MASK] 🦜")  # 🦜 is [UNK]
    tok = lm.tokenizer
    cls, sep, unk = (tok.tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[UNK]"))
    ids = inputs.ids[0].tolist()
    assert ids[0] == cls and ids[-1] == sep and ids[3] == tok.mask_id and unk in ids
    base = baseline_ids(lm, inputs)["hook_embed"][0].tolist()
    assert base == [cls, tok.pad_id, tok.pad_id, tok.mask_id, tok.pad_id, sep]


@pytest.mark.parametrize("tid", [10**6, -1])
def test_integrated_gradients_refuses_a_target_outside_the_vocabulary(tid):
    """Input × gradient refused these in one line; integrated gradients raised IndexError (10**6) or silently
    explained the vocabulary's last token (-1)."""
    lm = load("lecture-decoder")
    with pytest.raises(InputError, match=f"^target id {tid} is outside 0..{lm.cfg.vocab_size - 1}$"):
        integrated_gradients(lm, lm.encode("fenna is twelve ."), target_id=tid)
