"""The residual-stream hooks (TransformerLens names): every one fires with its shape in every architecture and
backend, the identities between them hold, and each can be replaced."""

import pytest
import torch
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import capture, intervene
from attnlab.model.transformer import build_model

from tests.model.helpers import tiny, tokens

ARCHS = [
    dict(arch="decoder"),
    dict(arch="decoder", positional="rope", mlp="swiglu", norm_type="rmsnorm", n_kv_heads=2),
    dict(arch="decoder", mlp="moe", n_experts=4, top_k=2),
    dict(arch="encoder", norm="post", positional="sinusoidal"),
    dict(arch="decoder", norm="peri", positional="alibi"),
]


@pytest.mark.parametrize("kw", ARCHS)
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flash"])
def test_every_named_hook_fires_in_every_backend(kw, backend):
    m = tiny(**kw)
    x = tokens(6, B=2)
    with torch.no_grad(), capture(names="*") as cap:
        m(x, backend=backend)
    assert list(cap.tensors) == [n for n in m.hook_names() if n in cap.tensors]
    assert sorted(cap.tensors) == sorted(m.hook_names())
    assert cap.tensor("hook_embed").shape == (2, 6, 32)
    assert cap.tensor("blocks.1.hook_resid_post").shape == (2, 6, 32)
    assert cap.tensor("blocks.0.attn.hook_result").shape == (2, 6, 4, 32)
    if kw.get("mlp") != "moe":
        assert cap.tensor("blocks.0.mlp.hook_post").shape == (2, 6, m.cfg.hidden)


def test_encdec_and_vit_hooks_fire_under_their_prefixes():
    m = tiny("encdec", n_layers=1, n_dec_layers=2)
    with torch.no_grad(), capture(names="*") as cap:
        m(tokens(7), tokens(5))
    assert sorted(cap.tensors) == sorted(m.hook_names())
    assert cap.tensor("encoder.blocks.0.hook_resid_post").shape == (1, 7, 32)
    assert cap.tensor("decoder.blocks.1.hook_cross_attn_out").shape == (1, 5, 32)
    assert cap.tensor("decoder.hook_pos_embed").shape == (1, 5, 32)
    cfg = ModelConfig(arch="vit", image_size=16, patch_size=4, n_classes=3, d_model=32, n_heads=4, n_layers=2,
                      positional="learned2d")
    torch.manual_seed(0)
    vit = build_model(cfg).eval()
    with torch.no_grad(), capture(names="*") as cap:
        vit(torch.randn(1, 3, 16, 16))
    assert sorted(cap.tensors) == sorted(vit.hook_names())
    assert cap.tensor("hook_embed").shape == (1, 17, 32) and cap.tensor("hook_pos_embed").shape == (1, 17, 32)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_stream_identities_pre_norm(backend):
    """resid_pre + attn_out = resid_mid; + mlp_out = resid_post = the next resid_pre; Σ_heads hook_result + b_O =
    hook_attn_out; embed + pos_embed = resid_pre of block 0; ln_final's normalized · w + b = the model's hidden state."""
    m = tiny(n_layers=3)
    x = tokens(9, B=2)
    with torch.no_grad(), capture(names="*") as cap:
        out = m(x, backend=backend)
    t = cap.tensor
    torch.testing.assert_close(t("hook_embed") + t("hook_pos_embed"), t("blocks.0.hook_resid_pre"), rtol=0, atol=0)
    for i in range(3):
        b = f"blocks.{i}"
        torch.testing.assert_close(t(f"{b}.hook_resid_pre") + t(f"{b}.hook_attn_out"), t(f"{b}.hook_resid_mid"),
                                   rtol=0, atol=0)
        torch.testing.assert_close(t(f"{b}.hook_resid_mid") + t(f"{b}.hook_mlp_out"), t(f"{b}.hook_resid_post"),
                                   rtol=0, atol=0)
        heads = t(f"{b}.attn.hook_result").sum(2) + m.blocks[i].attn.out.bias
        torch.testing.assert_close(heads, t(f"{b}.hook_attn_out"), rtol=0, atol=1e-6)
        if i:
            assert torch.equal(t(f"{b}.hook_resid_pre"), t(f"blocks.{i - 1}.hook_resid_post"))
    # ln_final (TransformerLens's): hook_normalized is the last resid_post over hook_scale, before the weight and bias
    resid, ln = t("blocks.2.hook_resid_post"), m.ln_f
    centred = resid - resid.mean(-1, keepdim=True)
    torch.testing.assert_close(t("ln_final.hook_scale"), centred.pow(2).mean(-1, keepdim=True).add(ln.eps).sqrt(),
                               rtol=0, atol=1e-6)
    torch.testing.assert_close(t("ln_final.hook_normalized") * ln.weight + ln.bias, out.hidden, rtol=0, atol=1e-6)


def test_hook_result_is_computed_only_on_demand_and_matches_the_fast_path():
    m = tiny(n_layers=2)
    x = tokens(8)
    with torch.no_grad():
        plain = m(x).logits
        with capture(names="blocks.*.hook_z") as cap:
            hooked = m(x).logits
        with capture(names="blocks.1.attn.hook_result") as cap2:
            summed = m(x).logits
    assert not any(n.endswith("hook_result") for n in cap.tensors)
    assert list(cap2.tensors) == ["blocks.1.attn.hook_result"]
    assert torch.equal(plain, hooked)
    assert torch.equal(summed, plain), "naming hook_result leaves the logits bit-identical"


def test_replacing_hook_result_of_one_head_equals_zeroing_its_z():
    m = tiny(n_layers=2)
    x = tokens(8)

    def drop_head(t, name):
        t = t.clone()
        t[:, :, 2] = 0
        return t

    def drop_z(t, name):
        t = t.clone()
        t[:, :, 2] = 0
        return t

    with torch.no_grad():
        a = m(x).logits
        with intervene({"blocks.0.attn.hook_result": drop_head}):
            b = m(x).logits
        with intervene({"blocks.0.attn.hook_z": drop_z}):
            c = m(x).logits
    torch.testing.assert_close(b, c, rtol=0, atol=1e-5)
    assert (a - b).abs().max() > 1e-4


def test_hook_embed_replaced_interpolates_and_carries_gradients():
    """Integrated gradients' path: hook_embed replaced by α·embedding (a batch of α), gradients w.r.t. α flow."""
    m = tiny(n_layers=2)
    x = tokens(6)
    alphas = torch.linspace(0, 1, 5, requires_grad=True)

    def scale(e, name):
        return e * alphas[:, None, None]  # [1, T, D] * [S, 1, 1] -> [S, T, D]

    with capture(names="hook_embed", interventions={"hook_embed": scale}, detach=False) as cap:
        logits = m(x.expand(1, -1)).logits  # one prompt, broadcast to 5 interpolation steps by the hook
    assert cap.tensor("hook_embed").shape == (5, 6, 32)
    with torch.no_grad():
        full = m(x).logits
        with intervene({"hook_embed": lambda e, n: torch.zeros_like(e)}):
            zero = m(x).logits
    torch.testing.assert_close(logits[-1], full[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits[0], zero[0], rtol=0, atol=1e-5)
    (g,) = torch.autograd.grad(logits[:, -1, 3].sum(), alphas)
    assert g.shape == (5,) and g.abs().sum() > 0


def test_replacing_the_residual_stream_moves_the_output():
    m = tiny(n_layers=2)
    clean, corrupt = tokens(7, seed=1), tokens(7, seed=2)
    with torch.no_grad():
        with capture(names="blocks.1.hook_resid_pre") as cap:
            want = m(clean).logits
        patched = {"blocks.1.hook_resid_pre": lambda t, n: cap.tensor("blocks.1.hook_resid_pre")}
        with intervene(patched):
            got = m(corrupt).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_pos_embed_has_the_batch_axis_as_in_transformerlens():
    """hook_pos_embed [B, T, D]: kept as a view of the [T, D] positions (no copy), equal across the batch; an
    intervention changing one row in place changes that row's output only."""
    m = tiny(n_layers=1)
    x = tokens(6, B=3)
    with torch.no_grad():
        plain = m(x).hidden
        with capture(names="hook_pos_embed") as cap:
            m(x)
        pos = cap.tensor("hook_pos_embed")
        assert pos.shape == (3, 6, 32) and pos.stride(0) == 0
        torch.testing.assert_close(pos[1], m.embed.pos.weight[:6], rtol=0, atol=0)

        def shift_row_1(p, name):
            p[1] *= 3.0  # in place, as a TransformerLens hook may

        with intervene({"hook_pos_embed": shift_row_1}):
            out = m(x).hidden
    assert torch.equal(out[[0, 2]], plain[[0, 2]]) and (out[1] - plain[1]).abs().max() > 1e-2
