"""TransformerLens names mean TransformerLens shapes: every attention hook in its layout, interventions on the head
axis of the hook they are given (or a one-line refusal), and keeping a hook never changes the logits."""

import copy

import numpy as np
import pytest
import torch
from attnlab.model.hooks import capture, intervene, replace_with, zero_head

from tests.model.helpers import tiny, tokens

B, T = 2, 7


@pytest.mark.parametrize("n_kv", [4, 2, 1], ids=lambda n: f"kv{n}")
def test_attention_hooks_have_transformerlens_layouts(n_kv):
    """q, z [batch, pos, head, d_head]; k, v [batch, pos, kv_head, d_head] (TL's GroupedQueryAttention keeps the
    k/v heads); result [batch, pos, head, d_model]; scores, pattern [batch, head, q, k]; stream [batch, pos, d]."""
    m = tiny(positional="rope", n_kv_heads=n_kv)
    with torch.no_grad(), capture(names="*") as cap:
        m(tokens(T, B=B))
    t = cap.tensor
    assert t("blocks.0.attn.hook_q").shape == t("blocks.0.attn.hook_z").shape == (B, T, 4, 8)
    assert t("blocks.0.attn.hook_k").shape == t("blocks.0.attn.hook_v").shape == (B, T, n_kv, 8)
    assert t("blocks.0.attn.hook_result").shape == (B, T, 4, 32)
    assert t("blocks.1.attn.hook_attn_scores").shape == t("blocks.1.attn.hook_pattern").shape == (B, 4, T, T)
    for name in ("blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.1.hook_resid_mid",
                 "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post", "ln_final.hook_normalized"):
        assert t(name).shape == (B, T, 32)
    rec = cap["blocks.0.attn"]
    np.testing.assert_array_equal(t("blocks.0.attn.hook_k")[0, :, n_kv - 1].numpy(), rec.k[0, n_kv - 1])  # [k, d]
    np.testing.assert_array_equal(t("blocks.0.attn.hook_q")[1, 3, 2].numpy(), rec.q[1, 2, 3])  # pos 3, head 2


ARCHS = [dict(arch="decoder"), dict(arch="decoder", positional="rope", n_kv_heads=2, mlp="swiglu"),
         dict(arch="encoder", norm="post"), dict(arch="decoder", positional="alibi", norm="peri")]


@pytest.mark.parametrize("kw", ARCHS, ids=lambda kw: "-".join(str(v) for v in kw.values()))
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_keeping_any_hook_leaves_the_output_bit_identical(kw, backend):
    """hook_result (heads' shares beside the projection) and the pattern under a fused kernel (computed beside it)
    included: the output equals the unhooked model's bit for bit."""
    m = tiny(n_layers=2, **kw)
    x = tokens(9, B=B)
    with torch.no_grad():
        plain = m(x, backend=backend).hidden
        for names in ("*", "blocks.1.attn.hook_result", "*.hook_pattern", "blocks.0.attn.hook_z", None):
            with capture(names=names) as cap:
                hooked = m(x, backend=backend).hidden
            assert torch.equal(hooked, plain), names
    kernel = cap["blocks.0.attn"].kernel
    assert kernel.startswith("eager") == (backend == "eager"), "a kept pattern leaves the fused kernel running"


def test_zero_head_acts_on_the_head_axis_of_each_hook():
    """zero_head(4) on hook_result ([B, T, H, D]) zeroes head 4, not position 4: the same logits as on hook_z, as
    zeroing head 4's pattern, and as zeroing its slice of W_O in a copy of the weights."""
    m = tiny(n_heads=8, n_layers=2)
    x = tokens(9, B=B)
    h = 4
    cut = copy.deepcopy(m)
    with torch.no_grad():
        cut.blocks[1].attn.out.weight[:, h * 4:(h + 1) * 4] = 0  # [D, H·d]: head 4's d_head columns
        want = cut(x).logits
        base = m(x).logits
        got = {}
        for hook in ("hook_result", "hook_z", "hook_pattern"):
            with intervene({f"blocks.1.attn.{hook}": zero_head(h)}):
                got[hook] = m(x).logits
    assert (want - base).abs().max() > 1e-3
    for hook, logits in got.items():
        torch.testing.assert_close(logits, want, rtol=0, atol=1e-6, msg=hook)


def test_zero_head_of_a_shared_kv_head_flattens_its_query_group():
    """Under GQA, hook_k's head axis is the k/v heads: zeroing k/v head 1 of 2 makes query heads 2, 3 (its group)
    attend uniformly (no positions: scores 0) and leaves heads 0, 1 as they were."""
    m = tiny(positional="none", n_kv_heads=2)
    x = tokens(6)
    with torch.no_grad():
        with capture() as base:
            m(x)
        with capture(interventions={"blocks.0.attn.hook_k": zero_head(1)}) as cap:
            m(x)
    p, p0 = cap["blocks.0.attn"].pattern(), base["blocks.0.attn"].pattern()
    uniform = torch.ones(6, 6).tril() / torch.arange(1, 7)[:, None]  # causal: row i spreads over its i + 1 keys
    for head in (2, 3):
        torch.testing.assert_close(torch.from_numpy(p[head]), uniform, rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.from_numpy(p[:2]), torch.from_numpy(p0[:2]), rtol=0, atol=0)


def test_a_hook_without_a_head_axis_or_a_missing_head_is_refused_in_one_line():
    m = tiny()
    x = tokens(6)
    with pytest.raises(ValueError, match=r"^blocks\.0\.hook_resid_pre has no head axis; a head is chosen in"):
        with intervene({"blocks.0.hook_resid_pre": zero_head(1)}):
            m(x)
    with pytest.raises(ValueError, match=r"^head 2 is out of range: blocks\.0\.attn\.hook_v has 1 heads \(axis 2\)$"):
        with intervene({"blocks.0.attn.hook_v": zero_head(2)}):
            tiny(n_kv_heads=1)(x)
    with pytest.raises(ValueError, match=r"^patch for head 1 of blocks\.0\.attn\.hook_z has shape \(1, 6, 4, 8\), "
                                         r"needs \(1, 6, 8\)$"):
        with intervene({"blocks.0.attn.hook_z": replace_with(torch.zeros(1, 6, 4, 8), head=1)}):
            m(x)
    with pytest.raises(ValueError, match="hook_mask has no head axis"):
        with intervene({"blocks.0.attn.hook_mask": replace_with(torch.zeros(1), head=0)}):
            m(x)


def test_replacing_with_the_runs_own_value_changes_nothing_and_in_place_changes_count():
    """replace_with(the cached value) on hook_result and hook_z: the same logits bit for bit; a TransformerLens-style
    hook that changes its argument in place and returns it moves the output exactly as a fresh tensor would."""
    m = tiny(n_layers=2)
    x = tokens(8, B=B)
    with torch.no_grad():
        with capture(names="blocks.0.attn.hook_*") as cap:
            base = m(x).logits
        for hook in ("hook_result", "hook_z", "hook_q"):
            name = f"blocks.0.attn.{hook}"
            with intervene({name: replace_with(cap.tensor(name).clone())}):
                assert torch.equal(m(x).logits, base), hook

        def in_place(r, name):
            r[:, :, 3] = 0
            return r

        with intervene({"blocks.0.attn.hook_result": in_place}):
            a = m(x).logits
        with intervene({"blocks.0.attn.hook_result": zero_head(3)}):
            b = m(x).logits
    assert torch.equal(a, b) and (a - base).abs().max() > 1e-4


def test_a_kept_pattern_with_gradients_is_the_one_on_the_path():
    """With gradients (detach=False, as training's attention hints and gradient rollout keep them), a kept pattern
    must be the one the output is computed from: the site runs eager even under sdpa, and the logits depend on it."""
    m = tiny()
    x = tokens(6)
    with capture(names="blocks.1.attn.hook_pattern", detach=False) as cap:
        logits = m(x, backend="sdpa").logits
    pattern = cap.tensor("blocks.1.attn.hook_pattern")
    (g,) = torch.autograd.grad(logits[0, -1, 3], pattern)
    assert g.shape == (1, 4, 6, 6) and g.abs().sum() > 0
    assert cap["blocks.1.attn"].kernel.startswith("eager") and not cap["blocks.0.attn"].kernel.startswith("eager")
