"""lm.run_with_cache and lm.run_with_hooks, TransformerLens's way: get_act_name's short names, a cache indexed by
them and by full name, logits that keeping hooks never changes, and hook functions fn(activation, hook)."""

import pytest
import torch
from attnlab.model.activation_cache import get_act_name
from attnlab.model.hooks import zero_head
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.analysis.interp_models import tiny_llama

TEXT = "garo is seven . garo owns a rabbit ."


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


def test_get_act_name_follows_transformerlens_rules():
    """The examples of TransformerLens's utils.get_act_name docstring, and the aliases."""
    assert get_act_name("k", 6, "a") == "blocks.6.attn.hook_k"
    assert get_act_name("pre", 2) == "blocks.2.mlp.hook_pre"
    assert get_act_name("embed") == "hook_embed"
    assert get_act_name("normalized", 27, "ln2") == "blocks.27.ln2.hook_normalized"
    assert get_act_name("k6") == "blocks.6.attn.hook_k"
    assert get_act_name("scale4ln1") == "blocks.4.ln1.hook_scale"
    assert get_act_name("pre5") == "blocks.5.mlp.hook_pre"
    assert get_act_name("attn", 3) == "blocks.3.attn.hook_pattern"
    assert get_act_name("resid_pre", 2) == "blocks.2.hook_resid_pre"
    assert get_act_name("z", 1, "attn") == "blocks.1.attn.hook_z"
    assert get_act_name("normalized") == "ln_final.hook_normalized"
    assert get_act_name("blocks.0.attn.hook_q") == "blocks.0.attn.hook_q"


def test_the_cache_is_indexed_like_transformerlens(lecture):
    logits, cache = lecture.run_with_cache(TEXT)
    T = len(lecture.encode(TEXT).tokens)
    assert logits.shape == (1, T, lecture.cfg.vocab_size)
    assert list(cache.keys()) == lecture.model.hook_names() and len(cache) == len(lecture.model.hook_names())
    assert cache["pattern", 3] is cache["blocks.3.attn.hook_pattern"] and cache["pattern", 3].shape == (1, 4, T, T)
    assert cache["q", 0].shape == (1, T, 4, 32) and cache["z", 1, "attn"].shape == (1, T, 4, 32)
    assert cache["resid_pre", 2].shape == (1, T, 128) and cache["result", 0].shape == (1, T, 4, 128)
    assert cache["resid_post", -1] is cache["blocks.3.hook_resid_post"] and cache["k2"] is cache["blocks.2.attn.hook_k"]
    assert ("pattern", 3) in cache and "blocks.0.hook_resid_mid" in cache and ("pattern", 9) not in cache
    assert torch.equal(cache["normalized"], cache["ln_final.hook_normalized"])
    with pytest.raises(KeyError, match="blocks.9.attn.hook_pattern is not in this cache"):
        cache["pattern", 9]


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_run_with_cache_logits_are_the_plain_runs_bit_for_bit(lecture, backend):
    inputs = lecture.encode(TEXT)
    plain = lecture.model(inputs.ids, backend=backend).logits
    logits, cache = lecture.run_with_cache(TEXT, backend=backend)
    assert torch.equal(logits, plain)
    few, small = lecture.run_with_cache(inputs, names=["*.hook_z", "blocks.0.hook_resid_pre"], backend=backend)
    assert torch.equal(few, plain) and sorted(small) == ["blocks.0.attn.hook_z", "blocks.0.hook_resid_pre",
                                                          "blocks.1.attn.hook_z", "blocks.2.attn.hook_z",
                                                          "blocks.3.attn.hook_z"]
    _, one = lecture.run_with_cache(inputs, names=lambda n: n.endswith("hook_pattern"), backend=backend)
    assert len(one) == 4 and torch.equal(one["pattern", 2], cache["pattern", 2])


def test_stacked_head_results_sum_with_the_bias_to_attn_out(lecture):
    _, cache = lecture.run_with_cache(TEXT)
    heads, labels = cache.stack_head_results(layer=-1, pos_slice=-1, return_labels=True)
    assert heads.shape == (16, 1, 128) and labels[:5] == ["L0H0", "L0H1", "L0H2", "L0H3", "L1H0"]
    for i in range(4):
        want = cache["attn_out", i][:, -1] - lecture.model.blocks[i].attn.out.bias
        torch.testing.assert_close(heads[4 * i:4 * i + 4].sum(0), want, rtol=1e-6, atol=1e-6)
    assert cache.stack_head_results(layer=2).shape == (8, 1, len(lecture.encode(TEXT).tokens), 128)


def test_run_with_hooks_takes_transformerlens_hook_functions(lecture):
    """fn(activation, hook): in place and returning None, or returning a value; a filter on names; several hooks on
    one name in order; each equal to the same intervention through forward(interventions=…)."""
    inputs = lecture.encode(TEXT)
    seen = []

    def ablate(z, hook):
        seen.append((hook.name, hook.layer()))
        z[:, :, 1, :] = 0.0  # head 1 of [batch, pos, head, d_head], in place, returns None

    def halve(z, hook):
        return z / 2

    got = lecture.run_with_hooks(TEXT, fwd_hooks=[(get_act_name("z", 2, "attn"), ablate), ("z2", halve)])
    assert seen == [("blocks.2.attn.hook_z", 2)]

    def both(z, name):
        z = z.clone()
        z[:, :, 1] = 0
        return z / 2

    want = lecture.forward(inputs, interventions={"blocks.2.attn.hook_z": both}, records=False).logits
    assert torch.equal(got, want)
    every = lecture.run_with_hooks(inputs, fwd_hooks=[(lambda n: n.endswith("attn.hook_z"), halve)])
    assert sorted(n for n, _ in seen) == ["blocks.2.attn.hook_z"]
    halved = lecture.forward(inputs, interventions={f"blocks.{i}.attn.hook_z": lambda z, n: z / 2 for i in range(4)},
                             records=False).logits
    assert torch.equal(every, halved)
    with pytest.raises(InputError, match="blocks.7.attn.hook_z is not a hook of this model"):
        lecture.run_with_hooks(TEXT, fwd_hooks=[("z7", halve)])
    with pytest.raises(ValueError, match="^hook_embed is not in a block: it has no layer$"):
        lecture.run_with_hooks(TEXT, fwd_hooks=[("embed", lambda x, hook: hook.layer())])


def test_batches_of_texts_and_token_ids():
    lm = tiny_llama()
    logits, cache = lm.run_with_cache(["hello world", "jello world"])
    assert logits.shape == (2, 12, 260) and cache["k", 0].shape == (2, 12, 2, 8)  # 2 of 6 heads keep k/v
    ids = torch.cat([lm.encode("hello world").ids, lm.encode("jello world").ids])  # [2, T]
    assert torch.equal(lm.run_with_hooks(ids), logits)
    assert torch.equal(lm.run_with_cache(ids[1])[0], logits[1:])
    with pytest.raises(InputError, match="a batch of texts needs one length; these are"):
        lm.run_with_cache(["hello", "hello world"])


def test_a_batch_of_texts_keeps_each_texts_token_types():
    """minilm (BERT: token types) on two texts of one length: each row as its own run, types included."""
    from attnlab.model.tl_runs import as_inputs

    lm = load("minilm")
    texts = ["the cat sat on the mat", "a dog ran in the park"]
    batch = as_inputs(lm, texts)
    rows = [lm.encode(t) for t in texts]
    assert batch.type_ids is not None and batch.type_ids.shape == batch.ids.shape == (2, rows[0].ids.shape[1])
    assert batch.type_ids.tolist() == [r.type_ids[0].tolist() for r in rows]
    name = "blocks.5.hook_resid_post"
    _, cache = lm.run_with_cache(texts, names=name)
    for i, r in enumerate(rows):
        _, one = lm.run_with_cache(r, names=name)
        torch.testing.assert_close(cache[name][i], one[name][0], atol=1e-5, rtol=0)  # [T, D]


def test_an_intervention_on_a_name_that_is_no_hook_is_refused(lecture):
    """A misspelt hook name (or a layer the model lacks) in forward's interventions is one line, not a run that
    silently changes nothing; run_with_hooks says the same; split-input hooks count only in a split run."""
    inputs = lecture.encode(TEXT)
    plain = lecture.forward(inputs, records=False).logits
    ablated = lecture.forward(inputs, interventions={"blocks.0.attn.hook_pattern": zero_head(1)}, records=False).logits
    assert (ablated - plain).abs().max() > 1e-3  # the real name changes the logits
    for name in ("blocks.0.attn.hook_patern", "blocks.9.attn.hook_pattern", "blocks.0.attn.hook_q_input"):
        with pytest.raises(InputError, match=f"^{name} is not a hook of this model"):
            lecture.forward(inputs, interventions={name: zero_head(1)}, records=False)
    with pytest.raises(InputError, match="^blocks.0.attn.hook_patern is not a hook of this model"):
        lecture.run_with_hooks(TEXT, fwd_hooks=[("blocks.0.attn.hook_patern", lambda x, hook: x)])
    split = lecture.forward(inputs, interventions={"blocks.0.attn.hook_q_input": lambda x, n: x}, records=False,
                            split_inputs=True).logits
    torch.testing.assert_close(split, plain, atol=1e-5, rtol=0)


def test_token_ids_outside_the_vocabulary_or_context_are_one_line(lecture):
    """Token ids are checked where they enter (a tensor given to run_with_cache, run_with_hooks or to_tokens): ids
    past the vocabulary, negative ids, no tokens, floats and too many tokens each give one InputError; the last
    vocabulary row and a context-long input run."""
    V, C = lecture.cfg.vocab_size, lecture.context
    cases = {"token id 322 is outside this model's vocabulary \\(0 to 321\\)$": torch.tensor([[1, 2, V]]),
             "token id -2 is outside": torch.tensor([1, -2, 3]),
             "the input gave no tokens": torch.zeros(1, 0, dtype=torch.long),
             f"the input is {C + 1} tokens long; this model's context is {C} tokens": torch.ones(1, C + 1).long(),
             "token ids are integers \\[batch, pos\\] or \\[pos\\], not torch.float32": torch.ones(1, 3),
             "token ids are integers .* of shape \\(1, 1, 3\\)": torch.ones(1, 1, 3).long()}
    assert V == 322
    for message, ids in cases.items():
        with pytest.raises(InputError, match="^" + message):
            lecture.run_with_cache(ids)
    logits, _ = lecture.run_with_cache(torch.full((2, C), V - 1), names="hook_embed")
    assert logits.shape == (2, C, V) and torch.isfinite(logits).all()


def test_an_intervention_may_change_its_tensor_in_place_and_return_none(lecture):
    """forward(interventions=…) takes what run_with_hooks takes: a function that changes the value in place and
    returns None equals one that returns the changed copy; a result of another shape or type is one line."""
    inputs = lecture.encode(TEXT)

    def in_place(z, name):
        z[:, :, 1] = 0.0

    got = lecture.forward(inputs, interventions={"blocks.1.attn.hook_z": in_place}, records=False).logits
    want = lecture.forward(inputs, interventions={"blocks.1.attn.hook_z": zero_head(1)}, records=False).logits
    plain = lecture.forward(inputs, records=False).logits
    assert torch.equal(got, want) and (got - plain).abs().max() > 1e-3
    T = inputs.ids.shape[1]
    with pytest.raises(ValueError, match=fr"^the intervention on blocks.1.attn.hook_z returned shape \(1, 2, 4, 32\); "
                                         fr"the hook's value has shape \(1, {T}, 4, 32\)$"):
        lecture.forward(inputs, interventions={"blocks.1.attn.hook_z": lambda z, n: z[:, :2]})
    with pytest.raises(ValueError, match="^the intervention on blocks.0.hook_resid_pre returned int; return a tensor"):
        lecture.run_with_hooks(inputs, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: 3)])


def test_gradients_through_run_with_cache_and_run_with_hooks(lecture):
    """grad=True: the gradient of one logit w.r.t. a cached stream (autograd) equals its finite difference along a
    direction, added through run_with_hooks; a hook function can keep its activation's gradient, and it equals
    the cache's. Without grad the logits carry none."""
    name, a = "blocks.2.hook_resid_pre", 7
    logits, cache = lecture.run_with_cache(TEXT, names=name, grad=True)
    (g,) = torch.autograd.grad(logits[0, -1, a], cache[name])  # [1, T, D]
    assert g.shape == cache[name].shape and g[0, -1].abs().sum() > 0
    v = torch.randn(g.shape, generator=torch.Generator().manual_seed(0)).double()
    eps = 1e-3

    def along(sign):
        def add(x, hook):
            return x + sign * eps * v.to(x)
        return lecture.run_with_hooks(TEXT, fwd_hooks=[(name, add)])[0, -1, a].double()

    fd = (along(1) - along(-1)) / (2 * eps)
    assert abs(float((g.double() * v).sum()) - float(fd)) < 5e-3 * max(1.0, abs(float(fd)))
    kept = {}

    def keep(x, hook):
        x.retain_grad()
        kept["x"] = x

    out = lecture.run_with_hooks(TEXT, fwd_hooks=[(name, keep)], grad=True)
    out[0, -1, a].backward()
    torch.testing.assert_close(kept["x"].grad, g, atol=1e-6, rtol=1e-5)
    assert not lecture.run_with_hooks(TEXT).requires_grad


def test_cache_keys_and_stacked_layers_out_of_range_are_one_line(lecture):
    """A layer the model lacks (also counted from the end), an int key and stack_head_results(layer=-2 or 5) each say
    what is wrong in one line (were 'blocks.-1.attn.hook_z is not in this cache', 'cannot unpack non-iterable int
    object'); in range they index as TransformerLens does (layer 0: no heads, an empty stack, as its)."""
    _, cache = lecture.run_with_cache(TEXT, names=["*hook_z", "*hook_result"])
    assert torch.equal(cache["z", -1], cache["blocks.3.attn.hook_z"]) and torch.equal(cache["z", -4], cache["z", 0])
    with pytest.raises(KeyError, match="layer -5 is outside this model's 4 layers \\(-4..3\\)"):
        cache["z", -5]
    assert ("z", -5) not in cache and ("z", -4) in cache
    with pytest.raises(KeyError, match="index the cache by a hook name or a \\(name, layer"):
        cache[3]
    for layer in (-2, 5):
        with pytest.raises(InputError, match=f"^layer {layer}: choose 0..4 \\(the input of that block; 4, -1 or "
                                             "None: the final stream\\)$"):
            cache.stack_head_results(layer=layer)
    assert cache.stack_head_results(layer=0, pos_slice=-1).shape == (0, 1, 128)
    two = cache.stack_head_results(layer=2, pos_slice=-1)  # [2·H, B, D]
    assert two.shape == (8, 1, 128) and torch.equal(two[5], cache["result", 1][:, -1, 1])


@pytest.mark.parametrize("norm", ["pre", "post", "peri", "parallel"])
def test_sub_layer_outputs_and_the_stream_as_the_readme_says(norm):
    """hook_attn_out is Σ heads' hook_result (+ the bias) on every block; the stream adds it as the block's norm rule
    says: pre and parallel plainly, post through LN(pre + out), peri through pre + norm(out)."""
    from attnlab.model.config import ModelConfig
    from attnlab.model.loaded import LoadedModel
    from attnlab.model.tokenizer import ByteTokenizer
    from attnlab.model.transformer import build_model

    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=32, norm=norm)
    torch.manual_seed(0)
    lm = LoadedModel(norm, build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    _, c = lm.run_with_cache("hello world")
    blk = lm.model.blocks[1]
    pre, out, post = c["resid_pre", 1], c["blocks.1.hook_attn_out"], c["resid_post", 1]
    torch.testing.assert_close(c["result", 1].sum(2) + blk.attn.out.bias, out, atol=1e-5, rtol=0)
    mlp = c["blocks.1.hook_mlp_out"]
    if norm == "parallel":
        torch.testing.assert_close(pre + out + mlp, post, atol=1e-5, rtol=0)
        return
    mid = c["resid_mid", 1]
    want = {"pre": pre + out, "post": blk.ln_attn_out(pre + out), "peri": pre + blk.ln_attn_out(out)}[norm]
    torch.testing.assert_close(mid, want, atol=1e-5, rtol=0)
    assert norm == "pre" or (mid - (pre + out)).abs().max() > 1e-3  # not a plain sum there


def test_reading_a_hook_the_run_did_not_keep_says_how_to_keep_it(lecture):
    out = lecture.forward(lecture.encode(TEXT), names="blocks.0.attn.hook_z", records=False)
    assert out.capture.tensor("blocks.0.attn.hook_z").shape[2:] == (4, 32)
    with pytest.raises(KeyError, match="blocks.1.attn.hook_z was not kept in this run \\(1 hooks were kept\\): name "
                                       "it in names=, e.g. names='blocks.1.attn.hook_z'"):
        out.capture.tensor("blocks.1.attn.hook_z")
    bare = lecture.forward(lecture.encode(TEXT), records=False)
    with pytest.raises(KeyError, match="\\(no hook tensor was kept\\)"):
        bare.capture.tensor("blocks.0.attn.hook_z")


def test_an_encoder_decoder_takes_its_source_through_encode():
    """A text alone is refused naming the call that reads a source (was the CLI's '(--src-text)'); encoded inputs
    run, and a cross-attention hook changes the logits."""
    lm = load("lecture-encdec")
    with pytest.raises(InputError, match="^lecture-encdec is an encoder–decoder: pass its inputs as "
                                         "lm.encode\\(target_text, src_text\\)$"):
        lm.run_with_cache("garo is seven .")
    inp = lm.encode("", "garo is seven .")
    logits, cache = lm.run_with_cache(inp)
    assert logits.shape == (1, 1, lm.cfg.vocab_size) and "decoder.blocks.0.cross_attn.hook_pattern" in cache
    cut = lm.run_with_hooks(inp, fwd_hooks=[("decoder.blocks.0.cross_attn.hook_pattern", lambda p, hook: p * 0)])
    assert (cut - logits).abs().max() > 0.1


def test_an_in_place_intervention_leaves_the_kept_tensors_as_they_were(lecture):
    """blocks.0.hook_resid_post and blocks.1.hook_resid_pre are one tensor: zeroing the second in place zeroed the
    kept first (|max| 0.0 instead of its clean value); the kept value is the clean run's exactly, and the
    intervention still acts (the logits equal returning a zeroed copy)."""
    inputs = lecture.encode(TEXT)
    kept, hook = "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"
    clean = lecture.forward(inputs, names=kept, records=False).capture.tensor(kept)

    def zero(x, name):
        x.zero_()

    out = lecture.forward(inputs, names=[kept, hook], interventions={hook: zero}, records=False)
    assert torch.equal(out.capture.tensor(kept), clean) and clean.abs().max() > 1
    assert out.capture.tensor(hook).abs().max() == 0  # the hook's own kept value is the changed one
    want = lecture.forward(inputs, interventions={hook: lambda x, n: torch.zeros_like(x)}, records=False).logits
    assert torch.equal(out.logits, want)
