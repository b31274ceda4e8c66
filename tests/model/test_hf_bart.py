"""BART (learned positions offset by 2, embedding LayerNorm) and Marian (sinusoidal positions, scaled embeddings,
SiLU): converted tiny random models equal transformers on every encoder, decoder and cross-attention pattern
(≤ 1e-5), hidden states and logits (≤ 1e-4), and greedy continuations."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.families.bart import bart_config, convert_bart, decoder_start, marian_positions

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

BASE = dict(vocab_size=40, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
            max_position_embeddings=32)
SHAPES = {
    "bart-a": ("Bart", dict(BASE, d_model=16, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
                            decoder_layers=2, encoder_ffn_dim=24, decoder_ffn_dim=24)),
    "bart-b": ("Bart", dict(BASE, d_model=12, encoder_attention_heads=3, decoder_attention_heads=3, encoder_layers=1,
                            decoder_layers=3, encoder_ffn_dim=20, decoder_ffn_dim=20, scale_embedding=True,
                            activation_function="gelu_new")),
    "marian-a": ("Marian", dict(BASE, pad_token_id=39, decoder_start_token_id=39, d_model=16, encoder_attention_heads=2,
                                decoder_attention_heads=2, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=24,
                                decoder_ffn_dim=24)),
    "marian-b": ("Marian", dict(BASE, pad_token_id=39, decoder_start_token_id=39, d_model=12, encoder_attention_heads=4,
                                decoder_attention_heads=4, encoder_layers=3, decoder_layers=1, encoder_ffn_dim=16,
                                decoder_ffn_dim=16, activation_function="relu")),
}


def _hf(name, seed=0):
    quiet_transformers()
    kind, kw = SHAPES[name]
    conf = getattr(transformers, f"{kind}Config")(**kw)
    conf._attn_implementation = "eager"
    cls = transformers.BartForConditionalGeneration if kind == "Bart" else transformers.MarianMTModel
    torch.manual_seed(seed)
    hf = cls(conf)
    table = {k: v.clone() for k, v in hf.state_dict().items() if "embed_positions" in k} if kind == "Marian" else {}
    perturbed(hf, scale=0.2, seed=seed)
    with torch.no_grad():  # Marian's sinusoidal table is fixed, not a weight: put it back
        for k, v in table.items():
            hf.get_parameter(k).copy_(v)
        hf.final_logits_bias.normal_(0, 0.5)  # a buffer: moved off zero too
    return hf


def _convert(hf):
    d = hf.config.to_dict()
    cfg = bart_config(d)
    return cfg, ours(cfg, convert_bart(saved_state(hf), cfg, d["model_type"]))


@pytest.mark.parametrize("name", list(SHAPES))
def test_parity_with_transformers(name):
    hf = _hf(name)
    cfg, model = _convert(hf)
    d = hf.config.to_dict()
    g = torch.Generator().manual_seed(5)
    src = torch.randint(3, 39, (1, 17), generator=g)
    tgt = torch.cat([torch.tensor([[decoder_start(d)]]), torch.randint(3, 39, (1, 9), generator=g)], 1)
    for backend in ("eager", "sdpa", "flash"):
        diffs = seq2seq_diffs(model, hf, src, tgt, backend)
        assert diffs["n_sites"] > 0
        assert diffs["attention"] <= TOL_ATTENTION and diffs["hidden"] <= TOL_HIDDEN and diffs["logits"] <= TOL_LOGITS, diffs
    assert greedy_equal(model, hf, src, decoder_start(d), n=10)


def test_marian_table_equals_transformers():
    hf = _hf("marian-a")
    ref = hf.model.encoder.embed_positions.weight
    assert torch.equal(marian_positions(*ref.shape), ref)
    sines = torch.sin(torch.arange(5.0)[:, None] / 10000 ** (torch.arange(0, 7, 2) / 7))  # [5, 4]: sines first
    torch.testing.assert_close(marian_positions(5, 7)[:, :4], sines)


def test_bart_offset_and_refusals():
    hf = _hf("bart-a")
    d = hf.config.to_dict()
    cfg = bart_config(d)
    assert (cfg.pos_offset, cfg.max_len, cfg.embed_norm, cfg.lm_head_bias) == (2, 32, True, True)
    with pytest.raises(CheckpointError, match="normalize_before"):
        bart_config({**d, "normalize_before": True})
    with pytest.raises(CheckpointError, match="decoder_attention_heads"):
        bart_config({**d, "decoder_attention_heads": 2})
    state = dict(saved_state(hf))
    del state["model.decoder.layers.1.encoder_attn.v_proj.bias"]
    with pytest.raises(CheckpointError, match=r"lacks decoder\.layers\.1\.encoder_attn\.v_proj\.bias"):
        convert_bart(state, cfg)
