"""T5 (relative-position buckets, no 1/√d scaling, RMSNorm, ReLU / gated GELU / gated SiLU): converted tiny random
models equal transformers on every encoder, decoder and cross-attention pattern (≤ 1e-5), hidden states and
logits (≤ 1e-4), and greedy continuations; the records keep raw q·k, the bias and the final score apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.families.t5 import convert_t5, decoder_start, t5_config
from attnlab.model.relative_bias import relative_buckets

from tests.hf_fixtures import quiet_transformers
from tests.model.parity import (
    TOL_ATTENTION,
    TOL_HIDDEN,
    TOL_LOGITS,
    greedy_equal,
    ours,
    perturbed,
    saved_state,
    seq2seq_diffs,
)

transformers = pytest.importorskip("transformers")

SHAPES = {
    "relu": dict(d_model=16, num_heads=4, d_kv=4, num_layers=2, d_ff=24, feed_forward_proj="relu"),
    "gated-gelu": dict(d_model=12, num_heads=3, d_kv=4, num_layers=2, num_decoder_layers=3, d_ff=20,
                       feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                       relative_attention_max_distance=12),
    "flan-small-like": dict(d_model=16, num_heads=3, d_kv=8, num_layers=2, num_decoder_layers=1, d_ff=24,
                            feed_forward_proj="gated-gelu", tie_word_embeddings=False),  # heads·d_kv ≠ d_model
    "gated-silu-untied": dict(d_model=16, num_heads=2, d_kv=8, num_layers=1, num_decoder_layers=2, d_ff=16,
                              feed_forward_proj="gated-silu", tie_word_embeddings=False,
                              relative_attention_num_buckets=16, relative_attention_max_distance=20),
}


def _hf(kw, seed=0):
    quiet_transformers()
    conf = transformers.T5Config(vocab_size=40, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **kw)
    conf._attn_implementation = "eager"
    torch.manual_seed(seed)
    return perturbed(transformers.T5ForConditionalGeneration(conf), scale=0.3, seed=seed)


def _convert(hf):
    d = hf.config.to_dict()
    cfg = t5_config(d)
    return cfg, ours(cfg, convert_t5(saved_state(hf), cfg))


@pytest.mark.parametrize("name", list(SHAPES))
def test_parity_with_transformers(name):
    hf = _hf(SHAPES[name])
    cfg, model = _convert(hf)
    g = torch.Generator().manual_seed(5)
    src = torch.randint(2, 40, (1, 30), generator=g)  # 30 tokens: distances past max_exact and max_distance
    tgt = torch.cat([torch.tensor([[decoder_start(hf.config.to_dict())]]), torch.randint(2, 40, (1, 13), generator=g)], 1)
    for backend in ("eager", "sdpa", "flash"):
        d = seq2seq_diffs(model, hf, src, tgt, backend)
        assert d["n_sites"] > 0
        assert d["attention"] <= TOL_ATTENTION and d["hidden"] <= TOL_HIDDEN and d["logits"] <= TOL_LOGITS, d
    assert greedy_equal(model, hf, src, decoder_start(hf.config.to_dict()), n=10)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_transformers(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-300, 300)
    for n, dist in ((32, 128), (8, 12), (16, 20)):
        ref = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=n, max_distance=dist)
        assert torch.equal(relative_buckets(rel, bidirectional, n, dist), ref)


def test_records_keep_raw_qk_bias_and_score_apart():
    hf = _hf(SHAPES["relu"])
    cfg, model = _convert(hf)
    src = torch.randint(2, 40, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), hooks.capture() as cap:
        model(src, torch.tensor([[0, 5, 6]]))
    rec = cap["encoder.blocks.1.attn"]
    assert rec.scale == 1.0 and rec.bias.shape == (4, 9, 9)
    np.testing.assert_allclose(rec.scores(), rec.raw_qk() + rec.bias, atol=1e-6)  # no 1/√d: score = q·k + bias
    # the encoder's bias is the bucket table looked up by k − q; the same for every layer of the stack
    np.testing.assert_array_equal(rec.bias, cap["encoder.blocks.0.attn"].bias)
    w = model.encoder.rel_bias.weight.detach().numpy()  # [buckets, H]
    b = relative_buckets(torch.arange(9)[None] - torch.arange(9)[:, None], True, 32, 128).numpy()
    np.testing.assert_array_equal(rec.bias, w[b].transpose(2, 0, 1))
    assert cap["decoder.blocks.0.cross_attn"].bias is None  # cross-attention has no position bias


def test_refusals():
    d = _hf(SHAPES["relu"]).config.to_dict()
    assert (t5_config({**d, "d_kv": 8}).d_head, t5_config({**d, "d_kv": 8}).d_attn) == (8, 32)
    with pytest.raises(CheckpointError, match="feed_forward_proj='gated-tanh'"):
        t5_config({**d, "feed_forward_proj": "gated-tanh"})
    hf = _hf(SHAPES["relu"])
    cfg = t5_config(d)
    state = dict(saved_state(hf))
    del state["decoder.block.1.layer.1.EncDecAttention.k.weight"]
    with pytest.raises(CheckpointError, match=r"lacks decoder\.block\.1\.layer\.1\.EncDecAttention\.k\.weight"):
        convert_t5(state, cfg)
