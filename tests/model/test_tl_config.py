"""lm.cfg answers TransformerLens's config names with the values TL's loader (loading_from_pretrained.py,
convert_hf_model_config, TL 3.9) sets for the same checkpoint: GPT-2 → d_vocab = vocab_size, n_ctx = n_positions,
"LN", "standard", n_key_value_heads None; Llama → n_ctx = max_position_embeddings, "RMS", "rotary", the k/v heads
when fewer than the heads (None when equal); T5 → "relative_positional_bias"; BERT → "LN", "standard"."""

from __future__ import annotations

import pytest
from attnlab.model.config import ModelConfig
from attnlab.model.hf.load import load_hf_folder

from tests.family_grid import TINY, make


@pytest.mark.parametrize(("family", "extra", "want"), [
    ("gpt2", {}, dict(d_vocab=None, n_ctx=40, normalization_type="LN", positional_embedding_type="standard",
                      n_key_value_heads=None)),
    ("llama", {}, dict(d_vocab=None, n_ctx=64, normalization_type="RMS", positional_embedding_type="rotary",
                       n_key_value_heads=2)),
    ("llama", {"num_key_value_heads": 4}, dict(n_ctx=64, n_key_value_heads=None)),
    ("bert", {}, dict(n_ctx=32, normalization_type="LN", positional_embedding_type="standard")),
    ("t5", {}, dict(normalization_type="RMS", positional_embedding_type="relative_positional_bias")),
], ids=["gpt2", "llama-gqa", "llama-mha", "bert", "t5"])
def test_tl_config_names_equal_tls_loader_values(tmp_path, family, extra, want):
    cls, conf = TINY[family]
    cfg = load_hf_folder(make(tmp_path, family, cls, **(conf | extra))).cfg
    if "d_vocab" in want:
        assert cfg.d_vocab == cfg.vocab_size and cfg.d_vocab > 100
    for k, v in want.items():
        if k != "d_vocab":
            assert getattr(cfg, k) == v, k


def test_positional_without_a_tl_name_is_refused_in_one_line():
    cfg = ModelConfig(positional="sinusoidal")
    with pytest.raises(ValueError, match=r"^positional='sinusoidal' has no TransformerLens [^\n]*$"):
        _ = cfg.positional_embedding_type
    assert ModelConfig(positional="alibi").positional_embedding_type == "alibi"
    assert ModelConfig(n_heads=4, n_kv_heads=1).n_key_value_heads == 1  # multi-query
