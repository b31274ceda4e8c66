"""TransformerLens's norm hooks: blocks.{l}.ln1/ln2(.._post)/ln_final .hook_scale [B, T, 1] and .hook_normalized
[B, T, D] (before the weight and bias), checked against transformers' own norm inputs (GPT-2's LayerNorm, Llama's
RMSNorm), interventions against transformers runs, and the plain forward left as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.hooks import capture, replace_with
from attnlab.model.norms import NormHooks
from attnlab.model.parity import load_transformers

from tests.family_grid import TINY, make
from tests.model.helpers import halved_norm_logits, norm_inputs, tiny, tl_norm, tokens

TEXT = "the cat sat on the mat because the mat was warm"


def is_norm_hook(name: str) -> bool:
    return name.endswith((".hook_scale", ".hook_normalized"))


@pytest.mark.parametrize(("kw", "n_norms"), [
    (dict(), 2 * 2 + 1), (dict(norm_type="rmsnorm", norm="peri"), 4 * 2 + 1), (dict(arch="encoder", norm="post"), 2 * 2),
    (dict(norm="parallel"), 2 * 2 + 1), (dict(arch="encdec"), (2 * 2 + 1) + (3 * 2 + 1))], ids=str)
def test_norm_hooks_fire_in_the_order_hook_names_lists_them(kw, n_norms):
    """Two hooks per norm with a scale (none for a post-norm stack's absent final norm), fired in hook_names'
    order; hook_scale [B, T, 1], hook_normalized [B, T, D]."""
    m = tiny(**kw)
    with torch.no_grad(), capture(names="*") as cap:
        m(tokens(7, B=2), tokens(5, B=2)) if kw.get("arch") == "encdec" else m(tokens(7, B=2))
    fired = [n for n in cap.tensors if is_norm_hook(n)]
    assert fired == [n for n in m.hook_names() if is_norm_hook(n)] and len(fired) == 2 * n_norms
    for n in fired:
        T = 5 if n.startswith("decoder.") else 7
        assert cap.tensor(n).shape == ((2, T, 1) if n.endswith("scale") else (2, T, 32)), n


def test_plain_forward_is_untouched_and_norm_hooks_run_only_when_touched(monkeypatch):
    """No capture, a records-only capture, other hooks kept, or every norm hook kept: the same output bit for bit;
    the hooked maths runs once per norm whose hooks are kept, never otherwise."""
    m = tiny(n_layers=2)
    x = tokens(9, B=2)
    assert type(m.ln_f).forward is nn.LayerNorm.forward  # the plain forward is torch's own
    calls = []
    real = NormHooks._centred
    monkeypatch.setattr(NormHooks, "_centred", lambda self, h: calls.append(1) or real(self, h))
    with torch.no_grad():
        plain = m(x).logits
        for names, n_calls in ((None, 0), ("blocks.0.hook_resid_pre", 0), ("blocks.1.ln2.hook_scale", 1),
                               ("*.hook_normalized", 5), ("*", 5)):
            calls.clear()
            with capture(names=names):
                out = m(x).logits
            assert torch.equal(out, plain) and len(calls) == n_calls, names


@pytest.fixture(scope="module")
def hf_pairs(tmp_path_factory):
    """{family: (our model, transformers' model, the norms' modules by our site)} for GPT-2 and Llama, float64."""
    out = {}
    for family in ("gpt2", "llama"):
        cls, conf = TINY[family]
        lm = load_hf_folder(make(tmp_path_factory.mktemp(family), family, cls, **conf))
        hf = load_transformers(lm).double()  # float64: the norms' inputs agree closer than float32's ~1e-6
        lm.to(dtype=torch.float64)
        if family == "gpt2":
            layers, final = hf.transformer.h, hf.transformer.ln_f
            norms = {f"blocks.{i}.{n}": getattr(b, m) for i, b in enumerate(layers) for n, m in (("ln1", "ln_1"),
                                                                                                  ("ln2", "ln_2"))}
        else:
            layers, final = hf.model.layers, hf.model.norm
            norms = {f"blocks.{i}.{n}": getattr(b, m) for i, b in enumerate(layers)
                     for n, m in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm"))}
        out[family] = (lm, hf, norms | {"ln_final": final})
    return out


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_scale_and_normalized_equal_transformers_own_norm_inputs(hf_pairs, family):
    lm, hf, norms = hf_pairs[family]
    ids = lm.encode(TEXT).ids
    seen, theirs = norm_inputs(hf, norms, ids)
    ours, cache = lm.run_with_cache(ids, names=["*ln*", "*.hook_resid_post"])
    assert (ours - theirs).abs().max() < 1e-5
    assert len(seen) == len(norms) == 2 * lm.cfg.n_layers + 1
    eps = lm.cfg.norm_eps
    for site, x in seen.items():
        scale, normalized = tl_norm(x, eps, centre=family == "gpt2")
        assert cache[f"{site}.hook_scale"].shape == (1, ids.shape[1], 1)
        torch.testing.assert_close(cache[f"{site}.hook_scale"], scale, rtol=0, atol=1e-6)
        torch.testing.assert_close(cache[f"{site}.hook_normalized"], normalized, rtol=0, atol=1e-6)
    ro = lm.readout()  # the readout's helpers: the final norm's output from hook_normalized, its scale from a stream
    torch.testing.assert_close(ro.head(ro.final_output(cache["ln_final.hook_normalized"])), ours, rtol=0, atol=1e-12)
    torch.testing.assert_close(ro.final_scale(cache["resid_post", -1]), cache["ln_final.hook_scale"], rtol=0, atol=0)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_doubling_one_scale_equals_halving_that_norms_output_in_transformers(hf_pairs, family):
    """hook_scale × 2 at blocks.1.ln1 = transformers with that norm's x̂·w halved (its bias, GPT-2's, kept)."""
    lm, hf, norms = hf_pairs[family]
    ids = lm.encode(TEXT).ids
    theirs = halved_norm_logits(hf, norms["blocks.1.ln1"], ids)
    ours = lm.run_with_hooks(ids, fwd_hooks=[("blocks.1.ln1.hook_scale", lambda s, hook: s * 2)])
    plain = lm.run_with_hooks(ids)
    assert (ours - plain).abs().max() > 1e-2  # the intervention changes the logits …
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)  # … as halving the norm's output does


def test_freezing_ln_final_scale_from_a_clean_run():
    """A corrupted run with ln_final.hook_scale replaced by the clean run's: the logits are the head of
    (x_corrupted − mean)/σ_clean·w + b, the norm made linear at the clean scale (TL's frozen-scale patching)."""
    m = tiny(n_layers=2)
    clean, corrupt = tokens(8, seed=1), tokens(8, seed=2)
    with torch.no_grad():
        with capture(names="ln_final.hook_scale") as cap:
            m(clean)
        sigma = cap.tensor("ln_final.hook_scale")
        plain = m(corrupt).logits
        with capture(names="blocks.1.hook_resid_post", interventions={"ln_final.hook_scale": replace_with(sigma)}) as c:
            frozen = m(corrupt).logits
    resid = c.tensor("blocks.1.hook_resid_post")
    expected = m.lm_head(m.ln_f.affine((resid - resid.mean(-1, keepdim=True)) / sigma))
    torch.testing.assert_close(frozen, expected, rtol=0, atol=1e-5)
    assert (frozen - plain).abs().max() > 1e-3


def test_interventions_and_gradients_on_hook_normalized():
    """hook_normalized zeroed: the norm's output is its bias alone; with gradients, d logit / d hook_normalized of
    ln_final is the token's unembedding row times the norm's weight (the weight is applied after the hook)."""
    m = tiny(n_layers=1)
    x = tokens(6)
    with torch.no_grad(), capture(interventions={"blocks.0.ln2.hook_normalized": lambda h, n: h * 0},
                                  names="blocks.0.mlp.hook_pre") as cap:
        m(x)
    torch.testing.assert_close(cap.tensor("blocks.0.mlp.hook_pre"),
                               m.blocks[0].mlp.up(m.blocks[0].ln_mlp.bias.expand(1, 6, 32)), rtol=0, atol=1e-6)
    with capture(names="ln_final.hook_normalized", detach=False) as cap:
        logits = m(x).logits
    normalized = cap.tensor("ln_final.hook_normalized")
    (grad,) = torch.autograd.grad(logits[0, -1, 7], normalized)
    torch.testing.assert_close(grad[0, -1], m.lm_head.weight[7] * m.ln_f.weight, rtol=0, atol=1e-6)
    assert grad[0, :-1].abs().max() == 0


def test_split_inputs_fire_ln1_once_per_q_k_v_input():
    """As TransformerLens's ln1 on hook_q_input, hook_k_input and hook_v_input: three scales [B, T, n, 1]."""
    m = tiny(n_layers=1, n_kv_heads=2)
    with torch.no_grad(), capture(names="blocks.0.ln*.hook_scale", split_inputs=True, records=False) as cap:
        m(tokens(5))
    assert [tuple(t.shape) for t in cap.tensors["blocks.0.ln1.hook_scale"]] == [(1, 5, 4, 1), (1, 5, 2, 1),
                                                                               (1, 5, 2, 1)]
    assert cap.tensor("blocks.0.ln2.hook_scale").shape == (1, 5, 1)
