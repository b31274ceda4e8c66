import numpy as np
import pytest
import torch
from attnlab.analysis.probes.relevance import attention_sites, gradient_relevance
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import InputError
from attnlab.model.registry import LoadedModel, load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

TEXT = "abcabx"


def tiny(arch="decoder", layers=1, seed=0, **fields) -> LoadedModel:
    """A float64 model with large random weights, so patterns are peaked and gradients sizeable; `fields` set
    more of its ModelConfig."""
    cfg = ModelConfig(**{**dict(arch=arch, d_model=16, n_heads=2, n_layers=layers, max_len=32,
                                output_head="mlm" if arch == "encoder" else None), **fields})
    torch.manual_seed(seed)
    model = build_model(cfg).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    src_tok = ByteTokenizer(add_bos=False, add_eos=True) if arch == "encdec" else None
    return LoadedModel(f"tiny-{arch}", model, ByteTokenizer(add_bos=True, add_eos=arch == "encoder"), cfg,
                       "random", src_tokenizer=src_tok)


def encode(lm, text=TEXT):
    return lm.encode(text, "xyz") if lm.arch == "encdec" else lm.encode(text)


def grads_by_leaf_patching(lm, inputs, pos, tid):
    """∂logit/∂A for every site, computed independently: one site at a time, its pattern is replaced by
    a leaf tensor holding the same values (later layers stay live, so the total derivative flows)."""
    def fwd():
        return lm.model(inputs.src_ids, inputs.ids) if lm.arch == "encdec" else lm.model(inputs.ids)

    with torch.no_grad(), hooks.capture(names="*.hook_pattern") as cap:
        fwd()
    out = {}
    for name, (value,) in cap.tensors.items():
        leaf = value.clone().requires_grad_(True)
        with torch.enable_grad(), hooks.intervene({name: hooks.replace_with(leaf)}):
            fwd().logits[0, pos, tid].backward()
        out[name] = (leaf.detach()[0], leaf.grad[0])  # (A [H, q, k], grad [H, q, k])
    return out


def cam(a, g):
    return torch.clamp(a * g, min=0).mean(0).numpy()  # mean_h relu(grad ⊙ A)


@pytest.mark.parametrize("pos", [2, 5, -1])
def test_one_layer_decoder_is_identity_plus_positive_grad_times_attention(pos):
    lm = tiny("decoder", 1)
    inp = encode(lm)
    t = inp.ids.shape[1]
    logits = lm.forward(inp).logits[0, pos]
    rel = gradient_relevance(lm, inp, position=pos)
    assert rel.target_id == int(logits.argmax())
    assert rel.logit == pytest.approx(float(logits.max()))
    assert rel.position == pos % t
    (a, g), = grads_by_leaf_patching(lm, inp, pos, rel.target_id).values()
    want = np.eye(t) + cam(a, g)
    np.testing.assert_allclose(rel.matrix, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rel.row, want[pos % t])
    assert (rel.row[: pos % t + 1] > 0).any() and rel.row[pos % t] >= 1


def test_gradient_matches_finite_difference_of_one_attention_weight():
    lm = tiny("decoder", 1)
    inp = encode(lm)
    pos, tid = 4, 7
    (a, g), = grads_by_leaf_patching(lm, inp, pos, tid).values()
    h, q, k, eps = 1, 4, 2, 1e-6

    def logit(delta):
        def bump(x, name):
            x = x.clone()
            x[0, h, q, k] += delta
            return x
        with torch.no_grad(), hooks.intervene({"blocks.0.attn.hook_pattern": bump}):
            return float(lm.model(inp.ids).logits[0, pos, tid])

    assert g[h, q, k].item() == pytest.approx((logit(eps) - logit(-eps)) / (2 * eps), rel=1e-5)


def test_two_layers_accumulate_from_the_first_layer_up():
    lm = tiny("decoder", 2, seed=3)
    inp = encode(lm)
    t, pos = inp.ids.shape[1], 5
    rel = gradient_relevance(lm, inp, position=pos, target_id=42)
    assert rel.target_id == 42
    g = grads_by_leaf_patching(lm, inp, pos, 42)
    c0, c1 = cam(*g["blocks.0.attn.hook_pattern"]), cam(*g["blocks.1.attn.hook_pattern"])
    eye = np.eye(t)
    np.testing.assert_allclose(rel.matrix, (eye + c1) @ (eye + c0), rtol=1e-10, atol=1e-12)
    # order matters: the reversed product differs
    assert not np.allclose(rel.matrix, (eye + c0) @ (eye + c1))


def test_rows_non_negative_and_causal_on_the_random_decoder():
    lm = load("random-decoder")
    inp = lm.encode("the cat sat on the mat")
    t = inp.ids.shape[1]
    for pos in (0, 3, t - 1):
        rel = gradient_relevance(lm, inp, position=pos)
        assert rel.matrix.shape == (t, t) and rel.row.shape == (t,)
        assert (rel.matrix >= 0).all()
        assert (rel.row[pos + 1:] == 0).all()  # later tokens are never relevant to an earlier output
        np.testing.assert_array_equal(np.triu(rel.matrix, 1), 0)
        assert rel.row[pos] >= 1 and rel.row[:pos + 1].sum() > 1


def test_encoder_relevance_at_a_masked_position_sees_both_sides():
    lm = tiny("encoder", 2)
    ids = lm.encode("abcdef").ids.clone()
    ids[0, 3] = lm.tokenizer.mask_id
    inp = lm.encode("abcdef")
    inp.ids = ids
    rel = gradient_relevance(lm, inp, position=3)
    assert (rel.row >= 0).all() and rel.row[3] >= 1
    assert rel.row[4:].sum() > 0 and rel.row[:3].sum() > 0  # bidirectional
    logits = lm.forward(inp).logits[0, 3]
    assert rel.target_id == int(logits.argmax())


def test_encdec_one_layer_by_hand():
    lm = tiny("encdec", 1, seed=1)
    inp = encode(lm)
    t, s, pos = inp.ids.shape[1], inp.src_ids.shape[1], 3
    rel = gradient_relevance(lm, inp, position=pos)
    g = grads_by_leaf_patching(lm, inp, pos, rel.target_id)
    c_enc = cam(*g["encoder.blocks.0.attn.hook_pattern"])
    c_dec = cam(*g["decoder.blocks.0.attn.hook_pattern"])
    c_x = cam(*g["decoder.blocks.0.cross_attn.hook_pattern"])
    r_ss = np.eye(s) + c_enc
    extra = r_ss - np.eye(s)
    r_bar = extra / extra.sum(-1, keepdims=True) + np.eye(s)
    np.testing.assert_allclose(rel.encoder_matrix, r_ss, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rel.matrix, np.eye(t) + c_dec, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rel.source_matrix, c_x @ r_bar, rtol=1e-10, atol=1e-12)
    assert rel.source_row.shape == (s,) and (rel.source_row >= 0).all() and rel.source_row.sum() > 0
    assert (rel.row[pos + 1:] == 0).all()


def test_sites_run_in_forward_order():
    lm = load("random-encdec")
    names = [m.site for m in attention_sites(lm.model)]
    assert names == ["encoder.blocks.0.attn", "encoder.blocks.1.attn",
                     "decoder.blocks.0.attn", "decoder.blocks.0.cross_attn",
                     "decoder.blocks.1.attn", "decoder.blocks.1.cross_attn"]


def test_bad_position_or_target_is_an_input_error():
    lm = tiny("decoder", 1)
    inp = encode(lm)
    with pytest.raises(InputError):
        gradient_relevance(lm, inp, position=99)
    with pytest.raises(InputError):
        gradient_relevance(lm, inp, target_id=10_000)


def test_leaves_the_model_without_gradients_or_hook_state():
    lm = tiny("decoder", 1)
    gradient_relevance(lm, encode(lm))
    assert all(p.grad is None for p in lm.model.parameters())
    assert hooks.active() is None and not lm.model.training


def test_an_encdec_position_outside_the_target_says_target_tokens():
    """An encoder–decoder's position counts the target (the decoder's logit), and the refusal says so; a decoder's
    still says input tokens."""
    from attnlab.analysis.probes.attributions import input_x_gradient

    lm = tiny("encdec", 1)
    inp = encode(lm)
    t, s = inp.ids.shape[1], inp.src_ids.shape[1]
    assert t != s
    want = rf"^position 9 is outside the {t} target tokens \(an encoder–decoder's position counts the target, not"
    for call in (gradient_relevance, input_x_gradient):
        with pytest.raises(InputError, match=want):
            call(lm, inp, position=9)
    dec = tiny("decoder", 1)
    with pytest.raises(InputError, match=rf"^position 99 is outside the {encode(dec).ids.shape[1]} input tokens$"):
        gradient_relevance(dec, encode(dec), position=99)
