"""RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA and ALBERT: converted tiny random models equal transformers'
(every attention pattern ≤ 1e-5, hidden states and MLM logits ≤ 1e-4) on several shapes."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.families.bert_like import convert_encoder, encoder_config, has_mlm_head

from tests.hf_fixtures import quiet_transformers
from tests.model.parity import (
    TOL_ATTENTION,
    TOL_HIDDEN,
    TOL_LOGITS,
    attention_diff,
    max_abs,
    ours,
    patterns,
    perturbed,
    saved_state,
)

transformers = pytest.importorskip("transformers")

# (family, config class, base class, MLM class, config kwargs)
BERTISH = dict(vocab_size=40, max_position_embeddings=24, intermediate_size=20)
SHAPES = [
    ("roberta", "RobertaConfig", "RobertaModel", "RobertaForMaskedLM",
     dict(BERTISH, hidden_size=12, num_attention_heads=3, num_hidden_layers=2, pad_token_id=1, type_vocab_size=1)),
    ("roberta", "RobertaConfig", "RobertaModel", "RobertaForMaskedLM",
     dict(BERTISH, hidden_size=16, num_attention_heads=4, num_hidden_layers=3, pad_token_id=3, type_vocab_size=2)),
    ("xlm-roberta", "XLMRobertaConfig", "XLMRobertaModel", "XLMRobertaForMaskedLM",
     dict(BERTISH, hidden_size=16, num_attention_heads=2, num_hidden_layers=2, pad_token_id=1, type_vocab_size=1)),
    ("xlm-roberta", "XLMRobertaConfig", "XLMRobertaModel", "XLMRobertaForMaskedLM",
     dict(BERTISH, hidden_size=8, num_attention_heads=1, num_hidden_layers=1, pad_token_id=0, type_vocab_size=1)),
    ("distilbert", "DistilBertConfig", "DistilBertModel", "DistilBertForMaskedLM",
     dict(vocab_size=40, max_position_embeddings=24, dim=12, n_heads=3, n_layers=2, hidden_dim=20)),
    ("distilbert", "DistilBertConfig", "DistilBertModel", "DistilBertForMaskedLM",
     dict(vocab_size=40, max_position_embeddings=24, dim=16, n_heads=4, n_layers=3, hidden_dim=24,
          sinusoidal_pos_embds=True)),
    ("electra", "ElectraConfig", "ElectraModel", "ElectraForMaskedLM",
     dict(BERTISH, embedding_size=8, hidden_size=12, num_attention_heads=3, num_hidden_layers=2)),
    ("electra", "ElectraConfig", "ElectraModel", "ElectraForMaskedLM",
     dict(BERTISH, embedding_size=16, hidden_size=16, num_attention_heads=2, num_hidden_layers=3)),
    ("albert", "AlbertConfig", "AlbertModel", "AlbertForMaskedLM",
     dict(BERTISH, embedding_size=8, hidden_size=12, num_attention_heads=3, num_hidden_layers=3)),
    ("albert", "AlbertConfig", "AlbertModel", "AlbertForMaskedLM",
     dict(BERTISH, embedding_size=6, hidden_size=16, num_attention_heads=4, num_hidden_layers=2, hidden_act="gelu")),
]
IDS = ["roberta-a", "roberta-b", "xlmr-a", "xlmr-b", "distil-a", "distil-sin", "electra-a", "electra-b",
       "albert-a", "albert-b"]


def _hf(config_cls, model_cls, kw, seed=0):
    quiet_transformers()
    conf = getattr(transformers, config_cls)(**kw)
    conf._attn_implementation = "eager"
    torch.manual_seed(seed)
    return perturbed(getattr(transformers, model_cls)(conf).eval(), seed=seed)


def _ids(hf, T=11):
    vocab = hf.config.vocab_size
    ids = torch.randint(0, vocab, (1, T), generator=torch.Generator().manual_seed(4))
    pad = getattr(hf.config, "pad_token_id", None)
    if pad is not None:
        ids[ids == pad] = (pad + 1) % vocab  # RoBERTa derives positions from non-pad tokens
    return ids


@pytest.mark.parametrize("family, conf, base, mlm, kw", SHAPES, ids=IDS)
@pytest.mark.parametrize("head", [False, True], ids=["base", "mlm"])
def test_parity_with_transformers(family, conf, base, mlm, kw, head):
    hf = _hf(conf, mlm if head else base, kw)
    state = saved_state(hf)
    assert has_mlm_head(family, state) == head
    cfg = encoder_config(hf.config.to_dict(), family, mlm=head)
    converted = convert_encoder(state, cfg, family)
    model = ours(cfg, converted)
    # every tensor of our model comes from the checkpoint (bar the MLM decoder, tied to the embeddings)
    assert set(model.state_dict()) - set(converted) <= {"mlm.decoder.weight"}
    ids = _ids(hf)
    sites = [f"blocks.{i}.attn" for i in range(cfg.n_layers)]
    tt = torch.zeros_like(ids) if cfg.type_vocab_size else None
    for backend in ("eager", "sdpa"):
        pats, out = patterns(lambda b=backend: model(ids, token_type_ids=tt, backend=b), sites)
        with torch.no_grad():
            ref = hf(ids, output_attentions=True, output_hidden_states=True)
        assert attention_diff(pats, ref.attentions) <= TOL_ATTENTION
        assert max_abs(out.hidden, ref.hidden_states[-1]) <= TOL_HIDDEN
        if head:
            assert max_abs(out.logits, ref.logits) <= TOL_LOGITS
        else:
            assert out.logits is None


def test_roberta_positions_start_after_padding_idx():
    kw = dict(BERTISH, hidden_size=8, num_attention_heads=2, num_hidden_layers=1, pad_token_id=5, type_vocab_size=1)
    cfg = encoder_config(transformers.RobertaConfig(**kw).to_dict(), "roberta", mlm=False)
    assert (cfg.pos_offset, cfg.max_len) == (6, 24 - 6)  # the table keeps 24 rows; 18 usable positions


def test_albert_layer_is_shared_by_every_block():
    kw = SHAPES[8][4]
    hf = _hf("AlbertConfig", "AlbertModel", kw)
    cfg = encoder_config(hf.config.to_dict(), "albert", mlm=False)
    state = convert_encoder(saved_state(hf), cfg, "albert")
    assert cfg.qkv_layout == "split" and "blocks.0.attn.qkv.weight" not in state
    for i in range(1, cfg.n_layers):
        for part in "qkv":
            assert torch.equal(state[f"blocks.{i}.attn.{part}.weight"], state[f"blocks.0.attn.{part}.weight"])
    with pytest.raises(CheckpointError, match="num_hidden_groups=2"):
        encoder_config({**hf.config.to_dict(), "num_hidden_groups": 2}, "albert", mlm=False)


def test_refusals_name_the_key():
    kw = SHAPES[0][4]
    hf = _hf("RobertaConfig", "RobertaForMaskedLM", kw)
    cfg = encoder_config(hf.config.to_dict(), "roberta", mlm=True)
    state = dict(saved_state(hf))
    del state["roberta.encoder.layer.1.output.dense.bias"]
    with pytest.raises(CheckpointError, match=r"lacks encoder\.layer\.1\.output\.dense\.bias"):
        convert_encoder(state, cfg, "roberta")
    with pytest.raises(CheckpointError, match="has an MLM head but the config asks for none"):
        convert_encoder(saved_state(hf), cfg.replace(output_head="none"), "roberta")
    state = dict(saved_state(hf), **{"roberta.encoder.layer.2.output.dense.bias": torch.zeros(12)})
    with pytest.raises(CheckpointError, match=r"unexpected weights encoder\.layer\.2"):
        convert_encoder(state, cfg, "roberta")
    with pytest.raises(CheckpointError, match="position_embedding_type"):
        encoder_config({**hf.config.to_dict(), "position_embedding_type": "relative_key"}, "roberta", mlm=False)


@pytest.mark.parametrize("family, cls", [("roberta", "RobertaForMaskedLM"), ("xlm-roberta", "XLMRobertaForMaskedLM")])
def test_a_padding_token_in_the_text_takes_robertas_position(tmp_path, family, cls):
    """RoBERTa gives a token equal to padding_idx the padding row and does not count it in the positions after
    it (its create_position_ids_from_input_ids). A text holding the pad token ("[PAD]" here, "<pad>" in a real
    vocabulary) used to be off by 1.76 in its logits (XLM-R 1.01), every position after it shifted by one."""
    from attnlab.model.hf.load import load_hf_folder
    from attnlab.model.parity import compare_hf

    from tests import family_grid as G

    folder = G.make(tmp_path / family, family, cls, **G.TINY[family][1])
    lm = load_hf_folder(folder)
    pad = lm.tokenizer.pad_id
    assert lm.cfg.pad_position_id == pad == 0 and lm.cfg.pos_offset == 1
    text = "the [PAD] cat sat on the [PAD] mat"
    ids = lm.encode(text).ids
    assert int((ids == pad).sum()) == 2
    r = compare_hf(str(folder), text)
    assert r["tokens_equal"] and r["max_abs_logits"] <= 1e-5 and r["max_abs_attention"] <= 1e-6, r
    rows = lm.model.embed.skip_padding(ids, torch.arange(ids.shape[1]))[0].tolist()  # [CLS] the [PAD] cat …
    assert rows == [0, 1, -1, 2, 3, 4, 5, -1, 6, 7]
    assert compare_hf(str(folder), "the cat sat")["max_abs_logits"] <= 1e-5  # without one: positions as before
