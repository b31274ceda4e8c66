"""TransformerLens's hooks on the norms inside attention and the embeddings: attn.q_norm / attn.k_norm (Qwen3,
Gemma 3) .hook_scale [B, T, n, 1] and .hook_normalized [B, T, n, d] (hook_q's layout), and BERT's embed.ln
(TL's BertEmbed.ln) .hook_scale [B, T, 1] / .hook_normalized [B, T, D]: equal to transformers' own norm inputs,
an intervention equal to the same change made in transformers, and nothing fired on the plain path."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.hooks import capture
from attnlab.model.parity import load_transformers

from tests.family_grid import TINY, make
from tests.model.helpers import halved_norm_logits, norm_inputs, tiny, tl_norm, tokens

TEXT = "the cat sat on the mat because the mat was warm"


def hf_norms(family, hf):
    """{our norm site: transformers' module} for the norms under test."""
    if family == "bert":
        return {"embed.ln": hf.bert.embeddings.LayerNorm}
    return {f"blocks.{i}.attn.{n}_norm": getattr(layer.self_attn, f"{n}_norm")
            for i, layer in enumerate(hf.model.layers) for n in ("q", "k")}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    out = {}
    for family in ("qwen3", "bert"):
        cls, conf = TINY[family]
        lm = load_hf_folder(make(tmp_path_factory.mktemp(family), family, cls, **conf))
        hf = load_transformers(lm).double()
        lm.to(dtype=torch.float64)
        out[family] = (lm, hf, hf_norms(family, hf))
    return out


@pytest.mark.parametrize("family", ["qwen3", "bert"])
def test_norm_hooks_equal_transformers_norm_inputs(pairs, family):
    lm, hf, norms = pairs[family]
    ids = lm.encode(TEXT).ids
    seen, _ = norm_inputs(hf, norms, ids)
    _, cache = lm.run_with_cache(ids, names=[f"{s}.*" for s in norms])
    assert len(seen) == len(norms) == (1 if family == "bert" else 2 * lm.cfg.n_layers)
    for site, x in seen.items():  # qwen3: x [B, T, n, d] (transformers' layout before the transpose)
        eps = norms[site].eps if family == "bert" else norms[site].variance_epsilon
        scale, normalized = tl_norm(x, eps, centre=family == "bert")
        assert cache[f"{site}.hook_scale"].shape == x.shape[:-1] + (1,)
        torch.testing.assert_close(cache[f"{site}.hook_scale"], scale, rtol=0, atol=1e-6)
        torch.testing.assert_close(cache[f"{site}.hook_normalized"], normalized, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("family", "site"), [("qwen3", "blocks.1.attn.k_norm"), ("bert", "embed.ln")])
def test_doubling_a_scale_equals_halving_that_norms_output_in_transformers(pairs, family, site):
    lm, hf, norms = pairs[family]
    ids = lm.encode(TEXT).ids
    theirs = halved_norm_logits(hf, norms[site], ids)
    ours = lm.run_with_hooks(ids, fwd_hooks=[(f"{site}.hook_scale", lambda s, hook: s * 2)])
    assert (ours - lm.run_with_hooks(ids)).abs().max() > 1e-3
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_listed_in_firing_order_and_silent_on_the_plain_path():
    for kw, x in (({"qk_norm": True, "norm_type": "rmsnorm"}, None), ({"arch": "encdec", "qk_norm": True}, 5),
                  ({"arch": "encoder", "norm": "post", "embed_norm": True}, None)):
        m = tiny(**kw)
        ids = tokens(6, B=2)
        with torch.no_grad():
            plain = m(ids, tokens(x, B=2)) if x else m(ids)
            with capture(names="*") as cap:
                out = m(ids, tokens(x, B=2)) if x else m(ids)
        assert torch.equal(out.hidden, plain.hidden)
        assert list(cap.tensors) == m.hook_names(), kw
        new = [n for n in cap.tensors if "_norm." in n or "embed.ln." in n]
        assert len(new) == (2 if "embed_norm" in kw else 4 * m.cfg.n_layers * (3 if x else 1)), kw
    m = tiny(qk_norm=True)
    with torch.no_grad(), capture(names="blocks.0.attn.q_norm.hook_normalized") as cap:
        m(tokens(6, B=2))
    assert cap.tensor("blocks.0.attn.q_norm.hook_normalized").shape == (2, 6, m.cfg.n_heads, m.cfg.d_head)
