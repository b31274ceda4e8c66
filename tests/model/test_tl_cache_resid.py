"""ActivationCache's residual-stream calls with TransformerLens's semantics, on a random transformers GPT-2 (LayerNorm,
learned positions), a random transformers Llama (RMSNorm, RoPE, grouped-query attention) and the bundled lecture
decoder: decompositions that sum to the hooked stream, the cached-scale norm that reproduces ln_final and ln1/ln2,
logit attributions that sum to the logit and equal analysis/probes/dla.py's, and refusals in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from attnlab.analysis.probes.dla import direct_logit_attribution
from attnlab.model import cache_resid
from attnlab.model.activation_cache import ActivationCache
from attnlab.model.config import ModelConfig
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

from tests.family_grid import TINY, make

TEXTS = {"gpt2": "the cat sat on the mat because the", "llama": "the cat sat on the mat because the",
         "lecture": "garo is seven . garo owns a rabbit . what pet does garo have ?"}
ANSWERS = {"gpt2": ("mat", "cat"), "llama": ("mat", "cat"), "lecture": ("rabbit", "parrot")}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {"lecture": load("lecture-decoder")}
    for family in ("gpt2", "llama"):
        cls, conf = TINY[family]
        out[family] = load_hf_folder(make(tmp_path_factory.mktemp(family), family, cls, **conf))
    return out


@pytest.fixture(scope="module", params=["gpt2", "llama", "lecture"])
def run(request, models):
    lm = models[request.param]
    logits, cache = lm.run_with_cache(TEXTS[request.param])
    return request.param, lm, logits, cache


def close(a, b, atol=1e-5, rtol=0.0):
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def test_decompose_resid_sums_to_each_hooked_stream(run):
    family, lm, _, cache = run
    n = lm.cfg.n_layers
    pos = ["pos_embed"] if family == "gpt2" else []  # RoPE: no position embeddings, as TransformerLens
    for layer in range(n + 1):
        parts, labels = cache.decompose_resid(layer, return_labels=True)
        want = cache["resid_pre", layer] if layer < n else cache["resid_post", n - 1]
        close(parts.sum(0), want)
        assert labels == ["embed", *pos] + [f"{i}_{k}_out" for i in range(layer) for k in ("attn", "mlp")]
        if layer < n:
            mid, labels = cache.decompose_resid(layer, mlp_input=True, return_labels=True)
            close(mid.sum(0), cache["resid_mid", layer])
            assert labels[-1] == f"{layer}_attn_out" and len(labels) == len(parts) + 1
    assert torch.equal(cache.decompose_resid(None), cache.decompose_resid(-1))
    attn, labels = cache.decompose_resid(mode="attn", incl_embeds=False, pos_slice=-1, return_labels=True)
    assert labels == [f"{i}_attn_out" for i in range(n)] and attn.shape == (n, 1, lm.cfg.d_model)
    assert torch.equal(attn[1], cache["attn_out", 1][:, -1])
    mlp = cache.decompose_resid(mode="mlp", incl_embeds=False, pos_slice=(1, 4))  # TL's tuple: slice(1, 4)
    assert torch.equal(mlp[0], cache["mlp_out", 0][:, 1:4])


def test_accumulated_resid_stacks_the_hooks_and_its_norm_is_each_norms_own(run):
    """accumulated_resid is the hooks themselves; with apply_ln a stream through the norm that reads it with its
    cached scale is that norm's hook_normalized, and at the final stream ln_final's own output (the logit lens)."""
    family, lm, _, cache = run
    n = lm.cfg.n_layers
    acc, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels == [f"{i}_{k}" for i in range(n) for k in ("pre", "mid")] + ["final_post"]
    assert torch.equal(acc, torch.stack([cache[k, i] for i in range(n) for k in ("resid_pre", "resid_mid")]
                                        + [cache["resid_post", n - 1]]))
    for layer in range(n):
        normed = cache.accumulated_resid(layer, apply_ln=True)  # [layer + 1, B, T, D]
        assert normed.shape[0] == layer + 1
        close(normed[-1], cache["normalized", layer, "ln1"])
        at_mlp, labels = cache.accumulated_resid(layer, apply_ln=True, mlp_input=True, return_labels=True)
        assert labels[-1] == f"{layer}_mid"
        close(at_mlp[-1], cache["normalized", layer, "ln2"])
    lens = cache.accumulated_resid(apply_ln=True, pos_slice=-1)  # [n + 1, B, D]
    ro = lm.readout()
    close(lens, ro.norm(acc[::2, :, -1]))  # ln_final recomputed on each row: the logit lens's stream
    logits = lens @ lm.W_U + lm.b_U
    close(logits[-1], run[2][:, -1], atol=1e-4)


def test_apply_ln_to_stack_of_the_final_stream_gives_ln_final_and_the_models_hidden_state(run):
    """apply_ln_to_stack(whole stream) · w (+ b) = ln_final's output = the hidden state the model's head reads."""
    family, lm, _, cache = run
    ln = lm.model.ln_f
    scaled = cache.apply_ln_to_stack(cache["resid_post", -1][None])[0]
    close(scaled, cache["ln_final.hook_normalized"])
    hidden = lm.forward(lm.encode(TEXTS[family]), records=False).hidden
    out = scaled * ln.weight + (ln.bias if getattr(ln, "bias", None) is not None else 0)
    close(out, hidden)
    parts = cache.decompose_resid(apply_ln=True)  # the parts through the one frozen scale sum to the whole
    close(parts.sum(0), scaled)
    if family == "gpt2":  # LayerNorm centres each part
        assert parts.mean(-1).abs().max() < 1e-6
    one = cache.apply_ln_to_stack(parts[:, :, -1], pos_slice=-1)  # pos_slice slices the cached scale
    close(one, cache.apply_ln_to_stack(parts[:, :, -1:], pos_slice=slice(-1, None))[:, :, 0])


@torch.no_grad()
def test_logit_attrs_sum_to_the_logit_and_equal_direct_logit_attribution(run):
    family, lm, logits, cache = run
    text, (answer, wrong) = TEXTS[family], ANSWERS[family]
    dla = direct_logit_attribution(lm, text, answer, wrong)
    a = lm.single_token_id(" " + answer) or lm.single_token_id(answer)
    b = lm.single_token_id(" " + wrong) or lm.single_token_id(wrong)
    parts = cache.decompose_resid(pos_slice=-1)  # [n, B, D], not normed: logit_attrs applies ln_final's scale
    ln, W_U = lm.model.ln_f, lm.W_U
    for tok, direction in ((a, W_U[:, a]), (b, W_U[:, b])):
        norm_bias = ln.bias @ direction if getattr(ln, "bias", None) is not None else 0
        got = cache.logit_attrs(parts, tok, pos_slice=-1).sum(0)
        close(got, logits[:, -1, tok] - lm.b_U[tok] - norm_bias, atol=1e-4)
    diff = cache.logit_attrs(parts, a, incorrect_tokens=b, pos_slice=-1)  # [n, B]
    assert abs(float(diff.sum()) - (dla.total - dla.norm_bias)) < 1e-4
    heads = cache.logit_attrs(cache.stack_head_results(pos_slice=-1), a, incorrect_tokens=b, pos_slice=-1)
    close(heads[:, 0].double(), torch.from_numpy(dla.heads).flatten(), atol=1e-4)
    mlps = cache.logit_attrs(cache.decompose_resid(mode="mlp", incl_embeds=False, pos_slice=-1), a, b, pos_slice=-1)
    close(mlps[:, 0].double(), torch.from_numpy(dla.mlps), atol=1e-4)
    full, labels = cache.get_full_resid_decomposition(pos_slice=-1, expand_neurons=False, return_labels=True)
    attrs = cache.logit_attrs(full, a, b, pos_slice=-1)[:, 0]
    embeds = [i for i, lab in enumerate(labels) if lab in ("embed", "pos_embed")]
    assert abs(float(attrs[embeds].sum()) - dla.embed) < 1e-4
    assert labels[-1] == "bias" and abs(float(attrs[-1]) - dla.attn_bias) < 1e-4
    batch = cache.logit_attrs(parts, torch.tensor([a]), incorrect_tokens=torch.tensor([b]), pos_slice=-1)
    close(batch, diff)
    unbatched = cache.logit_attrs(parts[:, 0], a, b, pos_slice=-1, batch_slice=0, has_batch_dim=False)  # [n]
    close(unbatched, diff[:, 0])
    with pytest.raises(InputError, match=r"^tokens and incorrect_tokens need one shape, not \(1,\) and \(2,\)$"):
        cache.logit_attrs(parts, torch.tensor([a]), incorrect_tokens=torch.tensor([b, b]), pos_slice=-1)


def test_full_resid_decomposition_sums_to_the_stream_head_by_head_and_neuron_by_neuron(run):
    family, lm, _, cache = run
    n, H = lm.cfg.n_layers, lm.cfg.n_heads
    d_mlp = lm.W_out.shape[1]
    for layer in (0, 1, n):
        want = cache["resid_pre", layer] if layer < n else cache["resid_post", n - 1]
        for expand in (True, False):
            full, labels = cache.get_full_resid_decomposition(layer, expand_neurons=expand, return_labels=True)
            assert len(labels) == full.shape[0]
            close(full.sum(0), want, atol=2e-5)
        assert labels[:layer * H] == [f"L{i}H{h}" for i in range(layer) for h in range(H)]
        if layer:
            assert labels[layer * H:layer * H + layer] == [f"{i}_mlp_out" for i in range(layer)]
    full, labels = cache.get_full_resid_decomposition(1, mlp_input=True, return_labels=True)
    close(full.sum(0), cache["resid_mid", 1], atol=2e-5)
    assert labels[2 * H - 1] == f"L1H{H - 1}" and labels[2 * H:2 * H + 2] == ["L0N0", "L0N1"]
    neuron = full[2 * H + 5]  # L0N5 = hook_post[..., 5] · W_out[0, 5]
    close(neuron, cache["post", 0, "mlp"][..., 5, None] * lm.W_out[0, 5], atol=1e-6)
    assert full.shape[0] == 2 * H + d_mlp + len([k for k in ("hook_embed", "hook_pos_embed") if k in cache]) + 1
    normed = cache.get_full_resid_decomposition(apply_ln=True, expand_neurons=False, pos_slice=-1)
    close(normed.sum(0), cache["ln_final.hook_normalized"][:, -1])


@pytest.mark.parametrize("apply_ln", [False, True])
def test_projected_decompositions_equal_the_rows_times_the_projection(run, apply_ln):
    """project_output_onto p: every row · p, the neurons' computed without their [.., D] rows (the frozen-scale norm
    folded into W_out under apply_ln, ln2's with mlp_input); a [D] vector drops the last axis."""
    family, lm, _, cache = run
    g = torch.Generator().manual_seed(0)
    p = torch.randn(lm.cfg.d_model, 3, generator=g)
    for layer, mlp_input in ((None, False), (1, True), (0, False)):
        kw = dict(layer=layer, mlp_input=mlp_input, apply_ln=apply_ln, pos_slice=(2, 6))
        full = cache.get_full_resid_decomposition(**kw)
        close(cache.get_full_resid_decomposition(**kw, project_output_onto=p), full @ p, atol=2e-5)
        close(cache.get_full_resid_decomposition(**kw, project_output_onto=p[:, 0]), full @ p[:, 0], atol=2e-5)
    neurons, labels = cache.stack_neuron_results(2, incl_remainder=True, apply_ln=apply_ln, project_output_onto=p,
                                                 return_labels=True)
    plain = cache.stack_neuron_results(2, incl_remainder=True, apply_ln=apply_ln)
    close(neurons, plain @ p, atol=2e-5, rtol=1e-5)  # the remainder is the whole stream: float32's relative 1e-6
    assert labels[-1] == "remainder" and neurons.shape[-1] == 3
    with pytest.raises(InputError, match=r"^project_output_onto is \[d_model\] or \[d_model, k\], not shape \(2, 2, 2\)$"):
        cache.get_full_resid_decomposition(project_output_onto=torch.zeros(2, 2, 2))


def test_head_results_from_z_equal_the_hooked_ones(run):
    """compute_head_results fills hook_result from hook_z and W_O where a cache lacks it; stack_head_results reads
    either alike; incl_remainder completes the stream."""
    family, lm, _, cache = run
    _, small = lm.run_with_cache(TEXTS[family], names=["*hook_z", "*hook_resid_post", "*hook_scale"])
    assert "blocks.0.attn.hook_result" not in small
    small.compute_head_results()
    for i in range(lm.cfg.n_layers):
        close(small["result", i], cache["result", i], atol=1e-6)
    stacked, labels = small.stack_head_results(return_labels=True, incl_remainder=True, pos_slice=-1)
    close(stacked[:-1], cache.stack_head_results(pos_slice=-1), atol=1e-6)
    assert labels[-1] == "remainder" and labels[0] == "L0H0"
    close(stacked.sum(0), cache["resid_post", -1][:, -1])
    stack = cache.stack_activation("scale", -1, "ln1")
    assert stack.shape == (lm.cfg.n_layers, 1, cache["resid_pre", 0].shape[1], 1)
    assert torch.equal(stack[1], cache["blocks.1.ln1.hook_scale"])


def test_a_neuron_stack_too_large_is_refused_in_one_line(models, monkeypatch):
    lm = models["lecture"]
    _, cache = lm.run_with_cache(TEXTS["lecture"])
    monkeypatch.setattr(cache_resid, "NEURON_CELLS", 10_000)
    with pytest.raises(InputError, match=r"^4 layers' neurons over these positions are [\d,]+ numbers \(more than "
                                         r"10,000\): take a pos_slice or a neuron_slice, or expand_neurons=False$"):
        cache.get_full_resid_decomposition()
    few = cache.stack_neuron_results(2, pos_slice=-1, neuron_slice=[3, 7])  # 2 layers × 2 neurons × 128 = 512
    assert few.shape == (4, 1, 128)
    close(few[3], cache["post", 1, "mlp"][:, -1, 7, None] * lm.W_out[1, 7], atol=1e-6)


def _lm(**kw) -> LoadedModel:
    cfg = ModelConfig(vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=32, **kw)
    torch.manual_seed(0)
    return LoadedModel("tiny", build_model(cfg).eval(), ByteTokenizer(), cfg, "random")


@pytest.mark.parametrize(("kw", "call", "match"), [
    (dict(arch="encdec"), "decompose_resid", r"^tiny is an encoder–decoder: read lm\.model\.encoder or "),
    (dict(arch="encoder", norm="post"), "decompose_resid", r"^tiny is post-norm: its stream is not the sum of the "),
    (dict(arch="encoder", norm="post"), "apply_ln", r"^block 1 reads its stream without a norm before it \(post-"),
    (dict(norm="peri"), "decompose_resid", r"^tiny is peri-norm: its stream is not the sum"),
    (dict(norm="parallel"), "incl_mid", r"^block 0 is parallel \(attention and MLP read its input\): it has no "),
    (dict(), "layer", r"^layer 3: choose 0\.\.2 \(the input of that block; 2, -1 or None: the final stream\)$"),
    (dict(), "mlp_input", r"^mlp_input: layer 2 is the final stream, which no MLP reads; choose 0\.\.1$"),
])
def test_models_whose_stream_does_not_split_are_refused_in_one_line(kw, call, match):
    lm = _lm(**kw)
    if lm.arch == "encdec":
        cache = ActivationCache({}, 2, model=lm)
    else:
        cache = lm.run_with_cache(lm.encode("a cat sat"))[1]
    x = torch.zeros(1, 1, 4, 32)
    calls = {"decompose_resid": lambda: cache.decompose_resid(), "apply_ln": lambda: cache.apply_ln_to_stack(x, 1),
             "incl_mid": lambda: cache.accumulated_resid(incl_mid=True), "layer": lambda: cache.decompose_resid(3),
             "mlp_input": lambda: cache.decompose_resid(mlp_input=True)}
    with pytest.raises(InputError, match=match):
        calls[call]()


def test_a_parallel_block_decomposes_its_mlp_input_without_its_attention(models):
    """In a parallel block the MLP reads the block's input (as attention does): mlp_input adds no attn_out and reads
    ln2's scale; the decomposition still sums to the stream."""
    lm = _lm(norm="parallel")
    _, cache = lm.run_with_cache(lm.encode("a cat sat on"))
    parts, labels = cache.decompose_resid(1, mlp_input=True, return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out"]
    close(parts.sum(0), cache["resid_pre", 1])
    close(cache.apply_ln_to_stack(parts, 1, mlp_input=True).sum(0), cache["normalized", 1, "ln2"])
    full = cache.get_full_resid_decomposition(1, mlp_input=True)
    close(full.sum(0), cache["resid_pre", 1])


def test_a_mixture_of_experts_decomposes_by_mlp_and_refuses_neurons_in_one_line():
    lm = _lm(mlp="moe", n_experts=4, top_k=2)
    _, cache = lm.run_with_cache(lm.encode("a cat sat on"))
    full = cache.get_full_resid_decomposition(expand_neurons=False)
    close(full.sum(0), cache["resid_post", 1])
    with pytest.raises(InputError, match=r"^tiny's MLPs are a mixture of experts: they have no single W_in/W_out$"):
        cache.get_full_resid_decomposition()


def test_a_vision_transformer_and_a_transformers_view_are_refused_in_one_line():
    vit = _lm(arch="vit", image_size=16, patch_size=4, n_classes=3)
    with pytest.raises(InputError, match=r"^tiny is a vision transformer: its stream starts from image patches"):
        ActivationCache({}, 2, model=vit).decompose_resid()
    assert vit.W_Q.shape == (2, 4, 32, 8)  # its weights still have TransformerLens's layouts
    view = SimpleNamespace(converted=False, name="some-view")
    with pytest.raises(InputError, match=r"^some-view runs in transformers itself \(a view\): its weights have no "):
        ActivationCache({}, 2, model=view).accumulated_resid()


def test_a_cache_without_a_model_says_so():
    cache = ActivationCache({"blocks.0.hook_resid_pre": torch.zeros(1, 2, 4)}, 1)
    with pytest.raises(InputError, match=r"^this cache has no model: make it with lm\.run_with_cache"):
        cache.decompose_resid()
    with pytest.raises(InputError, match="this cache has no model"):
        cache.compute_head_results()
