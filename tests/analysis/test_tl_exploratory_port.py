"""TransformerLens's "Exploratory Analysis Demo" (demos/Exploratory_Analysis_Demo.ipynb), ported step for step to
attnlab: the bundled lecture decoder's retrieval story stands in for GPT-2's indirect objects ("what pet does garo
have ?" → rabbit, not turtle; the corrupted prompt asks about hildo). Each TransformerLens line is kept, with
`model` → `lm`, `utils.get_act_name` → attnlab's; the numbers are checked against attnlab's own analysis
(direct_logit_attribution, activation_patching) and against a copy of the weights with a head's W_O cut."""

import copy
from functools import partial

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.dla import direct_logit_attribution
from attnlab.analysis.probes.patching import activation_patching
from attnlab.model import get_act_name, zero_head
from attnlab.model.registry import load
from attnlab.model.tl_runs import as_inputs

from tests.analysis.interp_models import CORRUPT, STORY

# the demo's prompts and answers: [correct, incorrect] per prompt
prompts = [STORY, CORRUPT]
answers = [("rabbit", "turtle"), ("turtle", "rabbit")]


@pytest.fixture(scope="module")
def demo():
    """The demo's setup cells: tokens, the clean run with its cache, the corrupted run, the logit differences."""
    torch.set_grad_enabled(False)
    lm = load("lecture-decoder")
    answer_tokens = torch.tensor([[lm.single_token_id(a), lm.single_token_id(b)] for a, b in answers])
    tokens = lm.to_tokens(prompts)  # the demo's model.to_tokens(prompts): [batch, pos]
    original_logits, cache = lm.run_with_cache(tokens)
    corrupted_prompts = [prompts[i + 1] if i % 2 == 0 else prompts[i - 1] for i in range(len(prompts))]
    corrupted_tokens = lm.to_tokens(corrupted_prompts)
    corrupted_logits, corrupted_cache = lm.run_with_cache(corrupted_tokens)
    yield dict(lm=lm, answer_tokens=answer_tokens, tokens=tokens, original_logits=original_logits, cache=cache,
               corrupted_tokens=corrupted_tokens, corrupted_logits=corrupted_logits)
    torch.set_grad_enabled(True)


def logits_to_ave_logit_diff(logits, answer_tokens, per_prompt=False):
    # Only the final logits are relevant for the answer
    final_logits = logits[:, -1, :]
    answer_logits = final_logits.gather(dim=-1, index=answer_tokens)
    answer_logit_diff = answer_logits[:, 0] - answer_logits[:, 1]
    if per_prompt:
        return answer_logit_diff
    return answer_logit_diff.mean()


def test_logit_difference(demo):
    """The model prefers the right pet in both prompts, by more than 5 logits."""
    per_prompt = logits_to_ave_logit_diff(demo["original_logits"], demo["answer_tokens"], per_prompt=True)
    lm = demo["lm"]
    want = [float(demo["original_logits"][i, -1, lm.single_token_id(a)] - demo["original_logits"][i, -1,
            lm.single_token_id(b)]) for i, (a, b) in enumerate(answers)]
    np.testing.assert_allclose(per_prompt.numpy(), want, rtol=0, atol=0)
    assert per_prompt.min() > 5
    corrupted = logits_to_ave_logit_diff(demo["corrupted_logits"], demo["answer_tokens"])
    assert corrupted < -5  # the corrupted prompts ask for the other pet


def test_direct_logit_attribution(demo):
    """The demo's DLA with TransformerLens's own calls (model.tokens_to_residual_directions, cache.apply_ln_to_stack,
    accumulated_resid, decompose_resid, stack_head_results, logit_attrs): the final stream through the frozen final
    LayerNorm along the logit-difference direction gives the logit difference (+ ln_final's bias, which TL folds
    into b_U); each call equals its formula by hand and the heads equal attnlab's direct_logit_attribution."""
    lm, cache, answer_tokens = demo["lm"], demo["cache"], demo["answer_tokens"]
    model = lm
    answer_residual_directions = model.tokens_to_residual_directions(answer_tokens)  # [batch, 2, d_model]
    ln, W_U = lm.model.ln_f, lm.model.lm_head.weight
    by_hand = W_U[answer_tokens] * ln.weight  # TL's fold_ln: w folded into W_U, then centred
    torch.testing.assert_close(answer_residual_directions, by_hand - by_hand.mean(-1, keepdim=True), rtol=0, atol=0)
    logit_diff_directions = answer_residual_directions[:, 0] - answer_residual_directions[:, 1]  # [batch, d_model]
    bias_term = (ln.bias * (W_U[answer_tokens[:, 0]] - W_U[answer_tokens[:, 1]])).sum(-1).mean()  # TL: in b_U
    final_residual_stream = cache["resid_post", -1]
    final_token_residual_stream = final_residual_stream[:, -1, :]
    scaled_final_token_residual_stream = cache.apply_ln_to_stack(final_token_residual_stream, layer=-1, pos_slice=-1)
    x = final_token_residual_stream
    by_hand = (x - x.mean(-1, keepdim=True)) / lm.readout().final_scale(x)  # centred, over ln_final's scale
    torch.testing.assert_close(scaled_final_token_residual_stream, by_hand, rtol=0, atol=1e-6)
    average_logit_diff = torch.einsum("bd,bd->", scaled_final_token_residual_stream, logit_diff_directions) / len(
        prompts) + bias_term
    original_average_logit_diff = logits_to_ave_logit_diff(demo["original_logits"], answer_tokens)
    torch.testing.assert_close(average_logit_diff, original_average_logit_diff, rtol=0, atol=1e-5)

    def residual_stack_to_logit_diff(residual_stack, cache):
        scaled_residual_stack = cache.apply_ln_to_stack(residual_stack, layer=-1, pos_slice=-1)
        return torch.einsum("...bd,bd->...", scaled_residual_stack, logit_diff_directions) / len(prompts)

    accumulated_residual, labels = cache.accumulated_resid(layer=-1, incl_mid=True, pos_slice=-1, return_labels=True)
    names = [n for i in range(4) for n in (get_act_name("resid_pre", i), get_act_name("resid_mid", i))]
    assert torch.equal(accumulated_residual, torch.stack([cache[n][:, -1] for n in names] + [x]))
    assert labels == [f"{i}_{k}" for i in range(4) for k in ("pre", "mid")] + ["final_post"]
    logit_lens_logit_diffs = residual_stack_to_logit_diff(accumulated_residual, cache)
    torch.testing.assert_close(logit_lens_logit_diffs[-1] + bias_term, average_logit_diff, rtol=0, atol=1e-5)
    per_layer_residual, labels = cache.decompose_resid(layer=-1, pos_slice=-1, return_labels=True)
    assert labels == ["embed"] + [f"{i}_{k}_out" for i in range(4) for k in ("attn", "mlp")]  # rotary: no pos_embed
    per_layer_logit_diffs = residual_stack_to_logit_diff(per_layer_residual, cache)
    torch.testing.assert_close(per_layer_logit_diffs.sum() + bias_term, average_logit_diff, rtol=0, atol=1e-5)
    per_head_residual, labels = cache.stack_head_results(layer=-1, pos_slice=-1, return_labels=True)
    per_head_logit_diffs = residual_stack_to_logit_diff(per_head_residual, cache).reshape(4, 4)  # [layer, head]
    attrs = cache.logit_attrs(per_head_residual, answer_tokens[:, 0], answer_tokens[:, 1], pos_slice=-1)  # [L·H, b]
    torch.testing.assert_close(attrs.mean(-1).reshape(4, 4), per_head_logit_diffs, rtol=0, atol=1e-6)
    attn_from_heads = per_head_logit_diffs.sum(1) + residual_stack_to_logit_diff(model.b_O[:, None].expand(-1, 2, -1),
                                                                                 cache)
    torch.testing.assert_close(attn_from_heads, per_layer_logit_diffs[1::2], rtol=0, atol=1e-5)
    mine = direct_logit_attribution(lm, prompts[0], "rabbit", "turtle").heads  # prompt 0 alone, float64
    np.testing.assert_allclose(attrs[:, 0].reshape(4, 4).numpy(), mine, atol=1e-4)
    assert labels[int(per_head_logit_diffs.argmax())] == "L3H0"  # measured: the last layer writes the answer most


def patch_residual_component(corrupted_residual_component, hook, pos, clean_cache):
    corrupted_residual_component[:, pos, :] = clean_cache[hook.name][:, pos, :]
    return corrupted_residual_component


def patch_head_vector(corrupted_head_vector, hook, head_index, clean_cache):
    corrupted_head_vector[:, :, head_index, :] = clean_cache[hook.name][:, :, head_index, :]
    return corrupted_head_vector


def patch_head_pattern(corrupted_head_pattern, hook, head_index, clean_cache):
    corrupted_head_pattern[:, head_index, :, :] = clean_cache[hook.name][:, head_index, :, :]
    return corrupted_head_pattern


def test_activation_patching(demo):
    """The residual stream per (layer, position) and each head's output (hook_z) from the clean run into the
    corrupted one, normalised as the demo does; prompt 0's share equals attnlab's activation_patching."""
    lm, cache, answer_tokens = demo["lm"], demo["cache"], demo["answer_tokens"]
    model, tokens, corrupted_tokens = lm, demo["tokens"], demo["corrupted_tokens"]
    clean = logits_to_ave_logit_diff(demo["original_logits"], answer_tokens, per_prompt=True)
    corrupt = logits_to_ave_logit_diff(demo["corrupted_logits"], answer_tokens, per_prompt=True)

    def normalize_patched_logit_diff(patched_logit_diff):
        # 0: no change from the corrupted run, 1: the clean run's performance restored
        return (patched_logit_diff - corrupt) / (clean - corrupt)

    mine = activation_patching(lm, STORY, CORRUPT, "rabbit", "turtle", layers=[1], backend="eager")
    patched_residual_stream_diff = torch.zeros(model.cfg.n_layers, tokens.shape[1], 2)
    for layer in range(model.cfg.n_layers):
        for position in range(tokens.shape[1]):
            hook_fn = partial(patch_residual_component, pos=position, clean_cache=cache)
            patched_logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[
                (get_act_name("resid_pre", layer), hook_fn)], return_type="logits")
            patched_logit_diff = logits_to_ave_logit_diff(patched_logits, answer_tokens, per_prompt=True)
            patched_residual_stream_diff[layer, position] = normalize_patched_logit_diff(patched_logit_diff)
    np.testing.assert_allclose(patched_residual_stream_diff[..., 0].numpy(), mine.resid, atol=1e-5)
    # the attention and MLP layers' outputs, the same way
    patched_attn_diff = torch.zeros(model.cfg.n_layers, tokens.shape[1], 2)
    patched_mlp_diff = torch.zeros(model.cfg.n_layers, tokens.shape[1], 2)
    for layer in range(model.cfg.n_layers):
        for position in range(tokens.shape[1]):
            hook_fn = partial(patch_residual_component, pos=position, clean_cache=cache)
            patched_attn_logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[
                (get_act_name("attn_out", layer), hook_fn)], return_type="logits")
            patched_attn_logit_diff = logits_to_ave_logit_diff(patched_attn_logits, answer_tokens, per_prompt=True)
            patched_mlp_logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[
                (get_act_name("mlp_out", layer), hook_fn)], return_type="logits")
            patched_mlp_logit_diff = logits_to_ave_logit_diff(patched_mlp_logits, answer_tokens, per_prompt=True)
            patched_attn_diff[layer, position] = normalize_patched_logit_diff(patched_attn_logit_diff)
            patched_mlp_diff[layer, position] = normalize_patched_logit_diff(patched_mlp_logit_diff)
    first = int((tokens[0] != corrupted_tokens[0]).nonzero()[0])  # the question's name: before it, equal streams
    assert (patched_attn_diff[:, :first] == 0).all() and (patched_mlp_diff[:, :first] == 0).all()
    assert patched_attn_diff[1, -1].min() > 0.9  # layer 1's attention moves the answer to "?"
    patched_head_z_diff = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, 2)
    for layer in range(model.cfg.n_layers):
        for head_index in range(model.cfg.n_heads):
            hook_fn = partial(patch_head_vector, head_index=head_index, clean_cache=cache)
            patched_logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[
                (get_act_name("z", layer, "attn"), hook_fn)], return_type="logits")
            patched_logit_diff = logits_to_ave_logit_diff(patched_logits, answer_tokens, per_prompt=True)
            patched_head_z_diff[layer, head_index] = normalize_patched_logit_diff(patched_logit_diff)
    np.testing.assert_allclose(patched_head_z_diff[..., 0].numpy(), mine.heads, atol=1e-5)
    assert patched_head_z_diff[1, 0].min() > 0.9  # layer 1 head 0 carries the answer in both prompts
    hook_fn = partial(patch_head_pattern, head_index=0, clean_cache=cache)
    patched_logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[(get_act_name("attn", 1, "attn"), hook_fn)])
    pattern_share = normalize_patched_logit_diff(logits_to_ave_logit_diff(patched_logits, answer_tokens, True))
    assert pattern_share.abs().max() < 0.01  # measured: it looks at the same place in both; what it reads differs


def head_ablation_hook(value, hook, head_index):
    value[:, :, head_index, :] = 0.0
    return value


def test_head_ablation(demo):
    """A TransformerLens hook zeroing one head's z equals al.zero_head on hook_z bit for bit, and a copy of the
    weights with that head's W_O columns zeroed to 1e-6."""
    lm, tokens = demo["lm"], demo["tokens"]
    layer, head = 1, 0
    ablated = lm.run_with_hooks(tokens, fwd_hooks=[(get_act_name("z", layer), partial(head_ablation_hook,
                                                                                       head_index=head))])
    same = lm.forward(as_inputs(lm, tokens), interventions={f"blocks.{layer}.attn.hook_z": zero_head(head)},
                      records=False).logits
    assert torch.equal(ablated, same)
    cut = copy.deepcopy(lm.model)
    d = lm.cfg.d_head
    cut.blocks[layer].attn.out.weight[:, head * d:(head + 1) * d] = 0  # [d_model, heads·d_head]
    torch.testing.assert_close(ablated, cut(tokens).logits, rtol=0, atol=1e-6)
    before = logits_to_ave_logit_diff(demo["original_logits"], demo["answer_tokens"])
    after = logits_to_ave_logit_diff(ablated, demo["answer_tokens"])
    assert after < before - 1  # the head matters
