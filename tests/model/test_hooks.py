import threading

import numpy as np
import pytest
import torch
from attnlab.model.hooks import capture, intervene, replace_with, zero_head

from tests.model.helpers import tiny, tokens

POINTS = ["hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_mask", "hook_pattern", "hook_z", "hook_result"]


def golden(sites):
    return [f"{s}.{p}" for s in sites for p in POINTS]


def ln(site):
    """TransformerLens's two hooks of the norm at `site` ('blocks.0.ln1', 'ln_final')."""
    return [f"{site}.hook_scale", f"{site}.hook_normalized"]


def block(b, cross=False, mlp=("hook_pre", "hook_post")):
    """TransformerLens's names for one pre-norm block `b` ('blocks.0'), in forward order: ln1 before attention, ln2
    before the MLP (a decoder block with cross-attention: ln2 before it, ln3 before the MLP, as TL's T5Block)."""
    names = [f"{b}.hook_resid_pre", *ln(f"{b}.ln1"), *golden([f"{b}.attn"]), f"{b}.hook_attn_out",
             f"{b}.hook_resid_mid"]
    if cross:
        names += [*ln(f"{b}.ln2"), *golden([f"{b}.cross_attn"]), f"{b}.hook_cross_attn_out",
                  f"{b}.hook_resid_mid_cross"]
    return names + ln(f"{b}.ln{3 if cross else 2}") + [f"{b}.mlp.{p}" for p in mlp] + [f"{b}.hook_mlp_out",
                                                                                       f"{b}.hook_resid_post"]


UNEMBED = ["unembed.hook_in", "unembed.hook_out"]  # TransformerLens's Unembed, after the final norm


def test_golden_hook_names_per_architecture():
    assert tiny("decoder", n_layers=2).hook_names() == [
        "hook_embed", "hook_pos_embed", *block("blocks.0"), *block("blocks.1"), *ln("ln_final"), *UNEMBED]
    # post-norm (BERT): each norm after its sub-layer, no final norm; rope: no position embedding; SwiGLU: the up
    # projection's own hook
    b = "blocks.0"
    assert tiny("encoder", n_layers=1, norm="post").hook_names() == [
        "hook_embed", "hook_pos_embed", f"{b}.hook_resid_pre", *golden([f"{b}.attn"]), f"{b}.hook_attn_out",
        *ln(f"{b}.ln1"), f"{b}.hook_resid_mid", f"{b}.mlp.hook_pre", f"{b}.mlp.hook_post", f"{b}.hook_mlp_out",
        *ln(f"{b}.ln2"), f"{b}.hook_resid_post"]
    swiglu = ("hook_pre", "hook_pre_linear", "hook_post")
    assert tiny("decoder", n_layers=1, positional="rope", mlp="swiglu", norm_type="rmsnorm").hook_names() == [
        "hook_embed", *block("blocks.0", mlp=swiglu), *ln("ln_final"), *UNEMBED]
    assert tiny("encdec", n_layers=1, n_dec_layers=2).hook_names() == [
        "encoder.hook_embed", "encoder.hook_pos_embed", *block("encoder.blocks.0"), *ln("encoder.ln_final"),
        "decoder.hook_embed", "decoder.hook_pos_embed", *block("decoder.blocks.0", cross=True),
        *block("decoder.blocks.1", cross=True), *ln("decoder.ln_final"), *(f"decoder.{n}" for n in UNEMBED),
    ]
    # peri-norm (Gemma 2): a norm before and after each sub-layer, TL's ln1_post and ln2_post
    peri = tiny("decoder", n_layers=1, norm="peri").hook_names()
    assert [n for n in peri if ".ln" in n or "_out" in n and "unembed" not in n] == [
        *ln(f"{b}.ln1"), f"{b}.hook_attn_out", *ln(f"{b}.ln1_post"), *ln(f"{b}.ln2"), f"{b}.hook_mlp_out",
        *ln(f"{b}.ln2_post")]
    # parallel (GPT-NeoX, Phi): ln1 and ln2 both read resid_pre; no resid_mid
    par = tiny("decoder", n_layers=1, norm="parallel").hook_names()
    assert par[:4] == ["hook_embed", "hook_pos_embed", f"{b}.hook_resid_pre", *ln(f"{b}.ln1")[:1]]
    assert par[par.index(f"{b}.hook_attn_out") + 1:par.index(f"{b}.mlp.hook_pre")] == ln(f"{b}.ln2")
    moe = tiny("decoder", n_layers=1, mlp="moe", n_experts=4, top_k=2).hook_names()
    assert moe[moe.index("blocks.0.hook_resid_mid") + 1:moe.index("blocks.0.hook_resid_post")] == [
        *ln("blocks.0.ln2"), "blocks.0.mlp.hook_router_logits", "blocks.0.mlp.hook_expert_choice", "blocks.0.hook_mlp_out"]


def test_every_hook_fires_with_expected_shapes():
    m = tiny("encdec")
    src, tgt = tokens(7), tokens(5)
    with capture(names="*") as cap:
        m(src, tgt)
    assert sorted(cap.tensors) == sorted(m.hook_names())
    assert cap.tensor("decoder.blocks.1.cross_attn.hook_pattern").shape == (1, 4, 5, 7)
    assert cap.tensor("decoder.blocks.1.cross_attn.hook_k").shape == (1, 7, 4, 8)
    assert cap.tensor("encoder.blocks.0.attn.hook_mask").dtype == torch.bool
    assert cap.tensor("decoder.blocks.0.attn.hook_z").shape == (1, 5, 4, 8)


def test_no_hook_state_outside_capture():
    m = tiny()
    x = tokens(6)
    with capture() as cap:
        m(x)
    before = len(cap.records["blocks.0.attn"])
    m(x)
    assert len(cap.records["blocks.0.attn"]) == before, "nothing is recorded outside the block"
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules())


def test_threads_capturing_on_one_shared_model_get_their_own_records():
    m = tiny()
    texts = {i: tokens(5 + i, seed=i) for i in range(8)}
    results, errors = {}, []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            for _ in range(5):
                with capture() as cap:
                    logits = m(texts[i], backend="sdpa" if i % 2 else "eager").logits
                rec = cap["blocks.1.attn"]
                assert rec.q_len == 5 + i
                results[i] = (rec.pattern(), logits)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, (pattern, logits) in results.items():
        with capture() as cap:
            ref = m(texts[i]).logits
        np.testing.assert_allclose(pattern, cap["blocks.1.attn"].pattern(), atol=1e-5)
        assert (logits - ref).abs().max() <= 1e-5


def test_zero_head_pattern_changes_exactly_that_head():
    m = tiny()
    x = tokens(8)
    with capture() as base:
        ref = m(x).logits
    with capture(interventions={"blocks.1.attn.hook_pattern": zero_head(2)}) as cap:
        out = m(x, backend="sdpa").logits
    p = cap["blocks.1.attn"].pattern()
    assert (p[2] == 0).all()
    np.testing.assert_allclose(p[[0, 1, 3]], base["blocks.1.attn"].pattern()[[0, 1, 3]], atol=1e-6)
    np.testing.assert_allclose(cap["blocks.0.attn"].pattern(), base["blocks.0.attn"].pattern(), atol=1e-6)
    assert (out - ref).abs().max() > 1e-6
    assert "pattern hook" in cap["blocks.1.attn"].kernel, "a fused run says it computed this site eagerly"


def test_ablating_head_output_equals_zeroing_its_pattern():
    m = tiny()
    x = tokens(8)
    with intervene({"blocks.0.attn.hook_z": zero_head(1)}):
        a = m(x, backend="flash").logits
    with intervene({"blocks.0.attn.hook_pattern": zero_head(1)}):
        b = m(x).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_patching_k_changes_scores_as_computed():
    m = tiny(positional="none")
    x = tokens(6)
    with capture(names="blocks.0.attn.hook_k") as cap:
        m(x)
    k = cap.tensor("blocks.0.attn.hook_k")
    new_k = torch.zeros_like(k[:, :, 0])  # [B, pos, head, d]: head 0
    with capture(interventions={"blocks.0.attn.hook_k": replace_with(new_k, head=0)}) as patched:
        m(x)
    rec = patched["blocks.0.attn"]
    assert np.abs(rec.scores(head=0)).max() == 0
    np.testing.assert_allclose(rec.pattern(head=0)[3, :4], 0.25, atol=1e-6)  # uniform over 4 visible keys
    with pytest.raises(ValueError, match="needs"):
        with intervene({"blocks.0.attn.hook_q": replace_with(torch.zeros(1))}):
            m(x)


def test_eager_records_recompute_scores_unless_an_intervention_changed_them():
    m = tiny(positional="alibi")  # a bias: scores are scale·q·kᵀ + bias
    x = tokens(7)
    with capture(names="blocks.1.attn.hook_attn_scores") as cap:
        m(x, backend="eager")
    rec = cap["blocks.1.attn"]
    assert rec.scores_full is None and rec.pattern_full is not None  # the pattern is kept, the scores are not
    hooked = cap.tensor("blocks.1.attn.hook_attn_scores")[0].numpy()
    np.testing.assert_allclose(rec.scores(), hooked, atol=2e-6, rtol=0)
    np.testing.assert_allclose(rec.scores(head=2, window=(3, 7, 0, 4)), hooked[2, 3:7, :4], atol=2e-6, rtol=0)

    doubled = {"blocks.1.attn.hook_attn_scores": lambda t, name: t * 2}
    with capture(interventions=doubled) as cap2:
        m(x, backend="eager")
    rec2 = cap2["blocks.1.attn"]
    assert rec2.scores_full is not None  # what the softmax really saw
    np.testing.assert_allclose(rec2.scores(), 2 * hooked, atol=4e-6, rtol=0)
    np.testing.assert_allclose(rec2.pattern(), torch.from_numpy(2 * hooked).masked_fill(
        ~torch.from_numpy(rec2.mask_for()), float("-inf")).softmax(-1).numpy(), atol=1e-6, rtol=0)


def test_hooks_cost_nothing_when_off_and_capture_keeps_gradients():
    m = tiny()
    x = tokens(6)
    with capture(names="*.hook_pattern", detach=False) as cap:
        logits = m(x).logits
    a = cap.tensor("blocks.0.attn.hook_pattern")
    assert a.requires_grad
    (grad,) = torch.autograd.grad(logits[0, -1, 3], a)
    assert grad.shape == a.shape and grad.abs().sum() > 0


def test_records_are_built_when_read_detached_and_equal_to_the_hooked_paths(monkeypatch):
    import attnlab.model.attention as attention

    m, x = tiny(n_layers=3), tokens(6)
    built = []
    real = attention.AttentionRecord
    monkeypatch.setattr(attention, "AttentionRecord", lambda **kw: built.append(kw["site"]) or real(**kw))
    with capture() as lazy:  # records only: the plain path, with gradients on
        m(x, backend="sdpa")
    assert built == [] and len(lazy._pending) == 3  # one append a site during the forward, no record made
    held = [t for _, _, args in lazy._pending for t in args if isinstance(t, torch.Tensor)]
    assert len(held) == 6 and not any(t.requires_grad for t in held)  # q and k a site, off the autograd graph
    assert lazy.sites == ["blocks.0.attn", "blocks.1.attn", "blocks.2.attn"] and len(built) == 3
    with capture(names="*.hook_z") as hooked:  # every attention hook fired
        m(x, backend="sdpa")
    for site in lazy.sites:
        a, b = lazy[site], hooked[site]
        assert a.layer == b.layer and a.kernel == b.kernel and a.q_offset == b.q_offset == 0
        np.testing.assert_array_equal(a.q, b.q)
        np.testing.assert_array_equal(a.k, b.k)
        np.testing.assert_allclose(a.pattern(), b.pattern(), atol=1e-7, rtol=0)
    assert lazy.records is lazy.records and len(built) == 6  # read once, kept
