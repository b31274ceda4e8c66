"""TransformerLens compatibility at the edges a fixed cross-check list missed, each against plain torch or transformers:
stack_head_results at layer 0 (an empty stack, as TransformerLens's) and refused where heads are not parts of the
stream (Gemma 2's norms after the sub-layers), Gemma's W_E as the run adds it (× √D, so W_E[ids] is hook_embed),
hook_rot_q / hook_rot_k (TransformerLens's names for q and k after RoPE), and bad input in one line."""

from __future__ import annotations

import pytest
import torch
import transformers
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.family_grid import TINY, make

IDS = torch.tensor([[5, 17, 33, 8, 91, 120, 4, 60, 77, 2], [9, 1, 44, 150, 7, 3, 12, 99, 201, 18]])  # [2, 10]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for family in ("gpt2", "llama", "gemma2"):
        cls, conf = TINY[family]
        folder = make(tmp_path_factory.mktemp(family), family, cls, **conf)
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        out[family] = (load_hf_folder(folder), hf)
    return out


def test_stack_head_results_at_layer_0_is_empty_and_its_remainder_is_the_first_stream(models):
    lm, hf = models["gpt2"]
    _, cache = lm.run_with_cache(IDS)
    empty, labels = cache.stack_head_results(0, return_labels=True)
    assert empty.shape == (0, 2, 10, lm.cfg.d_model) and labels == []
    rest, labels = cache.stack_head_results(0, incl_remainder=True, pos_slice=-1, return_labels=True)
    assert labels == ["remainder"]
    with torch.no_grad():  # the stream entering block 0: token + position embeddings, transformers' own
        stream = hf.transformer.wte(IDS) + hf.transformer.wpe(torch.arange(10))  # [2, 10, D]
    torch.testing.assert_close(rest[0], stream[:, -1], rtol=0, atol=1e-6)
    normed = cache.stack_head_results(0, incl_remainder=True, pos_slice=-1, apply_ln=True)[0]  # ln1 of block 0
    x = stream[:, -1] - stream[:, -1].mean(-1, keepdim=True)
    eps = hf.config.layer_norm_epsilon
    torch.testing.assert_close(normed, x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt(), rtol=0, atol=1e-5)
    with pytest.raises(InputError, match=r"^layer -2: choose 0\.\.2 \(the input of that block; 2, -1 or None"):
        cache.stack_head_results(-2)


def test_heads_of_a_sandwich_norm_stack_are_refused_in_one_line(models):
    """Gemma 2 norms each sub-layer's output before adding it: the heads' hook_result are not parts of the stream,
    so their stack (and logit_attrs on it) would be no attribution."""
    lm, _ = models["gemma2"]
    _, cache = lm.run_with_cache(IDS)
    with pytest.raises(InputError, match=r"is peri-norm: its stream is not the sum of the sub-layers' outputs"):
        cache.stack_head_results(pos_slice=-1)
    assert cache.stack_activation("result").shape == (3, 2, 10, 4, 32)  # the heads' outputs themselves stay


def test_gemma_W_E_is_the_embedding_the_run_adds(models):
    lm, hf = models["gemma2"]
    _, cache = lm.run_with_cache(IDS)
    with torch.no_grad():
        added = hf.model.embed_tokens(IDS)  # transformers' Gemma2TextScaledWordEmbedding: the table × √D
    torch.testing.assert_close(added, hf.model.embed_tokens.weight[IDS] * 32 ** 0.5, rtol=0, atol=1e-6)
    torch.testing.assert_close(lm.W_E[IDS], added, rtol=0, atol=1e-6)
    torch.testing.assert_close(lm.W_E[IDS], cache["hook_embed"], rtol=0, atol=1e-6)
    assert torch.equal(lm.W_U, hf.lm_head.weight.T)  # the unembedding stays the head's own (tied, unscaled)
    gpt2, hf2 = models["gpt2"]
    assert lm.W_E.shape == (lm.cfg.vocab_size, 32) and torch.equal(gpt2.W_E, hf2.transformer.wte.weight)


def test_rot_q_and_rot_k_are_q_and_k_after_rope(models):
    lm, hf = models["llama"]
    _, cache = lm.run_with_cache(IDS)
    attn = hf.model.layers[0].self_attn
    with torch.no_grad():  # transformers' own projection and rotation of layer 0's normed input
        x = hf.model.layers[0].input_layernorm(hf.model.embed_tokens(IDS))  # [2, 10, D]
        cos, sin = hf.model.rotary_emb(x, torch.arange(10)[None])
        q = attn.q_proj(x).view(2, 10, 4, 8).transpose(1, 2)  # [2, 10, H·d] -> [2, H, 10, d]
        k = attn.k_proj(x).view(2, 10, 2, 8).transpose(1, 2)
        q, k = transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(cache["rot_q", 0], q.transpose(1, 2), rtol=0, atol=1e-5)  # [2, 10, H, d]
    torch.testing.assert_close(cache["blocks.0.attn.hook_rot_k"], k.transpose(1, 2), rtol=0, atol=1e-5)
    assert "blocks.1.attn.hook_rot_q" in cache

    def shift(t, hook):  # position-dependent: before and after RoPE it would differ
        t[:, 3] = t[:, 7]

    via_rot = lm.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_rot_k", shift)])
    assert torch.equal(via_rot, lm.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_k", shift)]))
    assert not torch.allclose(via_rot, lm.run_with_hooks(IDS), atol=1e-3)
    gpt2, _ = models["gpt2"]  # no RoPE, no rotated q
    with pytest.raises(InputError, match=r"^blocks\.0\.attn\.hook_rot_q is not a hook of this model"):
        gpt2.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_rot_q", shift)])


def test_bad_arguments_are_one_line(models):
    lm, _ = models["gpt2"]
    _, cache = lm.run_with_cache(IDS)
    refused = {
        lambda: cache.accumulated_resid(pos_slice=12): r"^pos_slice 12 is outside the 10 entries there \(indices -10\.\.9\)$",
        lambda: cache.decompose_resid(pos_slice=[0, 40]): r"^pos_slice \[0, 40\] is outside the 10 entries there",
        lambda: cache.stack_head_results(pos_slice=torch.tensor([50])): r"^pos_slice \[50\] is outside the 10 ",
        lambda: cache.apply_ln_to_stack(cache["resid_pre", 1][None], 1, batch_slice=5):
            r"^batch_slice 5 is outside the 2 entries there \(indices -2\.\.1\)$",
        lambda: cache.stack_neuron_results(1, neuron_slice=[96]): r"^neuron_slice \[96\] is outside the 96 entries",
        lambda: cache.logit_attrs(cache.decompose_resid(pos_slice=-1), 10**6, pos_slice=-1):
            r"^token id 1000000 is outside this model's vocabulary \(0 to 299\)$",
        lambda: cache.logit_attrs(cache.decompose_resid(pos_slice=-1), torch.tensor([7, 11, 12]), pos_slice=-1):
            r"^tokens of shape \(3,\) do not fit the stack's \(batch, pos\) axes \(2,\): one token per row",
        lambda: lm.run_with_hooks(IDS, fwd_hooks=[(("z", 0), lambda z, hook: z)]):
            r"^fwd_hooks holds \(name, function\) pairs, name a hook name .* not name \('z', 0\)$",
        lambda: cache["resid_pre", 7]: r"^blocks\.7\.hook_resid_pre is not in this cache \(\d+ hooks; see cache",
    }
    for call, match in refused.items():
        with pytest.raises(InputError, match=match):
            call()
    with pytest.raises(KeyError):  # a missing hook is a mapping's KeyError too
        cache["nonexistent"]
    with pytest.raises(InputError, match=r"^blocks\.1\.attn\.hook_q_input is not in this cache \(\d+ hooks; see "
                                         r"cache\.keys\(\); split inputs: run_with_cache\(\.\.\., split_inputs=True\)\)$"):
        cache["blocks.1.hook_q_input"]
    _, small = lm.run_with_cache(IDS, names_filter=lambda n: "resid" in n or "embed" in n or n.endswith("_out"))
    assert sorted(small.keys()) == sorted(n for n in cache.keys() if "resid" in n or "embed" in n or n.endswith("_out"))
    with pytest.raises(InputError, match=r"^the norm's frozen scale is blocks\.1\.ln1\.hook_scale, which this cache "
                                         r"does not hold: keep it \(run_with_cache\(\.\.\., names=\[\.\.\., "):
        small.decompose_resid(1, apply_ln=True)
    with pytest.raises(InputError, match=r"^the norm's frozen scale is ln_final\.hook_scale"):
        small.logit_attrs(small.decompose_resid(pos_slice=-1), torch.tensor([7, 11]), pos_slice=-1)


def test_split_inputs_under_transformerlens_names_and_patched_in_place(models):
    """run_with_cache / run_with_hooks(split_inputs=True) (TransformerLens's use_split_qkv_input, use_hook_mlp_in):
    blocks.{l}.hook_q_input is each head's copy of the stream; a hook changing one head's copy in place changes that
    head's query only (it wrote through to the stream itself and every head's k and v before), and one scaling the
    MLP's input in place leaves the stream as it was."""
    lm, _ = models["llama"]
    _, clean = lm.run_with_cache(IDS, split_inputs=True)
    H, D = lm.cfg.n_heads, lm.cfg.d_model
    assert torch.equal(clean["blocks.1.hook_q_input"], clean["resid_pre", 1][:, :, None].expand(2, 10, H, D))
    assert clean["k_input", 1].shape == (2, 10, 2, D) and torch.equal(clean["blocks.0.hook_mlp_in"], clean["resid_mid", 0])
    seen = {}

    def keep(x, hook):
        seen[hook.name] = x.clone()

    def patch(x, hook):
        x[:, 4, 1] = x[:, 2, 1] * 1.7

    def scale(x, hook):
        x.mul_(1.3)

    names = ("blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v", "blocks.1.hook_resid_mid",
             "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post")
    lm.run_with_hooks(IDS, fwd_hooks=[("blocks.0.hook_q_input", patch), ("blocks.1.hook_mlp_in", scale)]
                      + [(n, keep) for n in names], split_inputs=True)
    changed = (seen["blocks.0.attn.hook_q"] - clean["q", 0]).abs().amax(-1) > 1e-4  # [B, T, H]
    assert changed[:, 4, 1].all() and changed.sum() == 2  # head 1 at position 4, in both rows, nothing else
    assert torch.equal(seen["blocks.0.attn.hook_k"], clean["k", 0]) and torch.equal(seen["blocks.0.attn.hook_v"],
                                                                                      clean["v", 0])
    stream = seen["blocks.1.hook_resid_post"] - seen["blocks.1.hook_mlp_out"]
    torch.testing.assert_close(stream, seen["blocks.1.hook_resid_mid"], rtol=0, atol=1e-6)


def test_remove_batch_dim_slices_and_neuron_results(models):
    """run_with_cache(remove_batch_dim=True) (TransformerLens's Main Demo's call): every tensor without its batch axis
    and the residual calls alike, each equal to the batched cache's row; apply_slice_to_batch_dim(i) equals a run of
    text i alone; get_neuron_results' rows sum (+ b_out) to the MLP's output."""
    lm, _ = models["gpt2"]
    _, both = lm.run_with_cache(IDS)
    _, one = lm.run_with_cache(IDS[1:], remove_batch_dim=True)
    assert not one.has_batch_dim and one["resid_pre", 1].shape == (10, lm.cfg.d_model)
    sliced = both.apply_slice_to_batch_dim(1)
    for name in ("blocks.1.hook_resid_pre", "blocks.0.attn.hook_pattern", "ln_final.hook_scale", "blocks.1.mlp.hook_post"):
        torch.testing.assert_close(one[name], both[name][1], rtol=0, atol=1e-5)  # a run of its own
        assert torch.equal(sliced[name], both[name][1])
    parts, labels = one.decompose_resid(pos_slice=-1, apply_ln=True, return_labels=True)
    torch.testing.assert_close(parts, both.decompose_resid(pos_slice=-1, apply_ln=True)[:, 1], rtol=0, atol=1e-5)
    assert labels[:2] == ["embed", "pos_embed"] and parts.shape == (6, lm.cfg.d_model)
    attrs = one.logit_attrs(one.decompose_resid(pos_slice=-1), 7, incorrect_tokens=3, pos_slice=-1)  # [6]
    torch.testing.assert_close(attrs, both.logit_attrs(both.decompose_resid(pos_slice=-1), torch.tensor([7, 7]),
                                                       incorrect_tokens=torch.tensor([3, 3]), pos_slice=-1)[:, 1],
                               rtol=0, atol=1e-5)
    assert one.remove_batch_dim() is one and one["resid_pre", 1].shape == (10, lm.cfg.d_model)  # a second call: same
    two = both.apply_slice_to_batch_dim([1, 0])
    assert two.has_batch_dim and torch.equal(two["resid_pre", 0][0], both["resid_pre", 0][1])
    with pytest.raises(InputError, match=r"^remove_batch_dim: this cache holds 2 texts; keep one first"):
        both.remove_batch_dim()
    with pytest.raises(InputError, match=r"^batch_slice 2 is outside the 2 entries there"):
        both.apply_slice_to_batch_dim(2)
    for i in range(lm.cfg.n_layers):
        rows = both.get_neuron_results(i)  # [B, T, d_mlp, D]
        assert rows.shape == (2, 10, 4 * lm.cfg.d_model, lm.cfg.d_model)
        torch.testing.assert_close(rows[1, 3, 5], both["post", i, "mlp"][1, 3, 5] * lm.W_out[i, 5], rtol=0, atol=1e-7)
        torch.testing.assert_close(rows.sum(-2) + lm.b_out[i], both["mlp_out", i], rtol=0, atol=1e-5)
    p = torch.randn(lm.cfg.d_model, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(both.get_neuron_results(1, neuron_slice=[2, 9], pos_slice=-1, project_output_onto=p),
                               both.get_neuron_results(1, pos_slice=-1)[:, [2, 9]] @ p, rtol=0, atol=1e-5)


def test_to_tokens_takes_transformerlens_prepend_bos(models):
    """to_tokens / to_str_tokens(prepend_bos=...) (TransformerLens's calls pass it; it was a TypeError): True puts the
    tokenizer's BOS id first once, False takes it away, None encodes as the tokenizer does."""
    lm, _ = models["gpt2"]
    tok = transformers.AutoTokenizer.from_pretrained(lm.name)
    text = "the cat sat"
    plain = torch.tensor([tok(text)["input_ids"]])  # [1, T]: transformers' own encoding, no BOS
    assert torch.equal(lm.to_tokens(text), plain) and torch.equal(lm.to_tokens(text, prepend_bos=False), plain)
    with_bos = lm.to_tokens([text, "the mat sat"], prepend_bos=True)
    assert with_bos.shape[1] == plain.shape[1] + 1 and (with_bos[:, 0] == tok.bos_token_id).all()
    assert torch.equal(with_bos[:1, 1:], plain)
    assert lm.to_str_tokens(text, prepend_bos=True) == [tok.decode([tok.bos_token_id])] + lm.to_str_tokens(text)
    assert lm.to_str_tokens([text], prepend_bos=False) == [[tok.decode([i]) for i in plain[0].tolist()]]
    lecture = load("lecture-decoder")  # its byte tokenizer puts a BOS first itself
    ids = lecture.to_tokens("a cat")
    assert ids[0, 0] == lecture.tokenizer.bos_id and torch.equal(lecture.to_tokens("a cat", prepend_bos=True), ids)
    assert torch.equal(lecture.to_tokens("a cat", prepend_bos=False), ids[:, 1:])


def test_negative_layers_follow_transformerlens(models):
    """TransformerLens maps layer None and -1 to n_layers in accumulated_resid, decompose_resid,
    stack_head_results and get_full_resid_decomposition, and no other negative (its range(layer) would stack
    nothing): -1 equals n_layers here, -2 is one line."""
    lm, _ = models["gpt2"]
    _, cache = lm.run_with_cache(lm.to_tokens("the cat sat on the mat"))
    n = lm.cfg.n_layers
    for call in (cache.accumulated_resid, cache.decompose_resid, cache.get_full_resid_decomposition):
        assert torch.equal(call(-1), call(n)) and torch.equal(call(None), call(n))
        with pytest.raises(InputError, match=rf"^layer -2: choose 0\.\.{n} \(the input of that block"):
            call(-2)
