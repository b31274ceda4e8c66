"""Direct logit attribution: the parts sum to the model's logit exactly (frozen final-norm scale)."""

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.dla import direct_logit_attribution
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import capture
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

from tests.analysis.interp_models import STORY, tiny_llama


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


def test_parts_sum_to_the_logit_layernorm(lecture):
    d = direct_logit_attribution(lecture, STORY, "rabbit")
    logit = lecture.forward(lecture.encode(STORY)).logits[0, -1, lecture.single_token_id("rabbit")]
    assert d.logit == pytest.approx(float(logit), abs=0)
    assert d.total == pytest.approx(d.logit, abs=2e-5)
    parts = d.embed + d.heads.sum() + d.attn_bias + d.mlps.sum() + d.norm_bias
    assert parts == pytest.approx(d.total, abs=1e-9)
    assert d.heads.shape == (4, 4) and d.mlps.shape == (4,) and d.norm == "LayerNorm" and d.scale > 0
    js = d.to_json()
    assert js["frozen_scale"]["norm"] == "LayerNorm" and len(js["heads"]) == 4


def test_parts_sum_to_the_logit_difference_rmsnorm_gqa():
    lm = tiny_llama()
    for pos in (-1, 3):
        d = direct_logit_attribution(lm, "hello world", "o", "w", position=pos)
        logits = lm.forward(lm.encode("hello world")).logits[0, pos]
        want = float(logits[lm.single_token_id("o")] - logits[lm.single_token_id("w")])
        assert d.logit == pytest.approx(want, abs=1e-6)
        assert d.total == pytest.approx(d.logit, abs=2e-5)
        assert d.norm == "RMSNorm" and d.heads.shape == (3, 6) and d.norm_bias == 0


def test_head_parts_are_hook_result_read_through_the_frozen_norm(lecture):
    """Each head's part equals its hook_result at the position, centred, over σ, dotted with w ⊙ W_U[answer]."""
    d = direct_logit_attribution(lecture, STORY, "rabbit")
    stack = lecture.model
    with torch.no_grad(), capture(names="blocks.*.attn.hook_result") as cap:
        stack(lecture.encode(STORY).ids)
    u = (stack.ln_f.weight * stack.lm_head.weight[lecture.single_token_id("rabbit")]).double()
    for i in range(4):
        r = cap.tensor(f"blocks.{i}.attn.hook_result")[0, -1].double()  # [H, D]
        want = ((r - r.mean(-1, keepdim=True)) / d.scale) @ u
        np.testing.assert_allclose(d.heads[i], want.detach().numpy(), atol=1e-5)


def test_bad_input_is_one_line(lecture):
    with pytest.raises(InputError, match="2 tokens"):
        direct_logit_attribution(lecture, STORY, "rabbit", "a hen")
    with pytest.raises(InputError, match="^position 40 is out of range: the text has positions 0–33$"):  # not "this model"
        direct_logit_attribution(lecture, STORY, "rabbit", position=40)
    with pytest.raises(InputError, match="without a linear unembedding"):
        direct_logit_attribution(load("lecture-encoder"), "the [MASK] sat", "cat")
    torch.manual_seed(0)
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=32, norm="post")
    post = LoadedModel("post", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    with pytest.raises(InputError, match="post-norm: its stream is not a sum"):
        direct_logit_attribution(post, "abc", "d")


@pytest.mark.parametrize("kw", [dict(norm="parallel"), dict(norm="parallel", positional="rope", qkv_bias=True)])
def test_parallel_blocks_sum_to_the_logit_difference(kw):
    """GPT-NeoX's and Phi's parallel blocks write attention and MLP into the same stream, x + attn(ln(x)) + mlp(ln(x)):
    it is a sum, and the parts add up to the logit difference (was refused: 'is parallel-norm: its stream is not a
    sum of the heads' outputs')."""
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=32, n_heads=4, n_layers=3, max_len=32, **kw)
    torch.manual_seed(0)
    lm = LoadedModel("parallel", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    d = direct_logit_attribution(lm, "hello world", "o", "w")
    logits = lm.forward(lm.encode("hello world")).logits[0, -1]
    want = float(logits[lm.single_token_id("o")] - logits[lm.single_token_id("w")])
    assert d.logit == pytest.approx(want, abs=1e-6) and abs(want) > 1e-3
    assert d.total == pytest.approx(d.logit, abs=2e-5)
    assert d.heads.shape == (3, 4) and np.abs(d.heads).max() > 1e-4 and np.abs(d.mlps).max() > 1e-4


def test_parts_sum_to_the_logit_with_t5_logit_scale():
    """T5 with tied embeddings scales the decoder's output by d^-1/2 before the head: the parts include it (they
    summed to logit·√d = logit / 0.177 before)."""
    cfg = ModelConfig(arch="encdec", vocab_size=260, d_model=32, n_heads=4, n_layers=2, max_len=64,
                      positional="relative", rel_buckets=8, norm_type="rmsnorm", bias=False, logit_scale=32 ** -0.5,
                      tie_embeddings=True)
    torch.manual_seed(0)
    lm = LoadedModel("t5-ish", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
    d = direct_logit_attribution(lm, "hello", "a", "b", src_text="world")
    logits = lm.forward(lm.encode("hello", "world")).logits[0, -1]
    want = float(logits[lm.single_token_id("a")] - logits[lm.single_token_id("b")])
    assert d.logit == pytest.approx(want, abs=1e-6) and abs(want) > 1e-3
    assert d.total == pytest.approx(d.logit, abs=2e-6)
