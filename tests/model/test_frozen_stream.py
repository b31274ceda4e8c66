"""The residual stream as named parts (model/frozen_stream.py): with every norm frozen at its actual scale the parts
sum to hook_resid_pre of every block, under each residual rule; a frozen norm of a sum equals the norm."""

import pytest
import torch
import torch.nn as nn
from attnlab.model.config import ModelConfig
from attnlab.model.frozen_stream import FrozenNorm, attn_parts, block_parts, embed_parts, through
from attnlab.model.hooks import capture
from attnlab.model.transformer import build_model


@pytest.mark.parametrize("norm", [nn.LayerNorm(8, eps=1e-5), nn.RMSNorm(8, eps=1e-6), nn.Identity()])
def test_a_frozen_norm_of_the_parts_is_the_norm(norm):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in norm.parameters():
            p.add_(torch.randn_like(p))
    parts = {name: torch.randn(5, 8, dtype=torch.float64) * 3 for name in "abc"}
    out = through(norm, parts, "beta")
    x = sum(parts.values())
    want = norm(x.float()).double()
    torch.testing.assert_close(sum(out.values()), want, atol=1e-5, rtol=0)
    assert ("beta" in out) == isinstance(norm, nn.LayerNorm)
    assert FrozenNorm(norm, x).scale.shape == (5, 1)


@pytest.mark.parametrize("conf", [dict(norm="pre"), dict(norm="post", type_vocab_size=2, embed_norm=True),
                                  dict(norm="peri", positional="sinusoidal"), dict(norm="parallel", positional="rope"),
                                  dict(norm="pre", d_embed=12, arch="encoder")])
def test_the_parts_sum_to_every_blocks_input(conf):
    cfg = ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=3, max_len=20, **conf)
    torch.manual_seed(1)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad(), capture(names=lambda n: True) as cap:
        model(ids)
    t = cap.tensor
    pos = t("hook_pos_embed")[0] if "hook_pos_embed" in cap.tensors else None
    parts = embed_parts(model.embed, t("hook_embed")[0], pos, None)
    for blk in model.blocks:
        torch.testing.assert_close(sum(parts.values()), t(f"{blk.site}.hook_resid_pre")[0].double(), atol=1e-5, rtol=0)
        parts = block_parts(blk, parts, attn_parts(blk.attn, t(f"{blk.attn.site}.hook_z")[0]),
                            t(f"{blk.site}.hook_mlp_out")[0])
    torch.testing.assert_close(sum(parts.values()), t(f"{model.blocks[-1].site}.hook_resid_post")[0].double(),
                               atol=1e-5, rtol=0)
    assert list(parts)[0] == "embed" and ("blocks.2.attn.head.1" in parts)
    if cfg.norm == "post":
        assert {"type_embed", "embed.norm.bias", "blocks.2.ln_mlp_out.bias"} <= set(parts)
    if cfg.d_embed:
        assert "embed.project.bias" in parts
