"""Pure converters: HF GPT-2 / BERT state dicts → ours, every key and shape checked."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.model.checkpoint import CheckpointError, load_weights  # noqa: E402
from attnlab.model.families import FAMILIES, supported_families  # noqa: E402
from attnlab.model.families.bert import bert_config, convert_bert, has_mlm_head  # noqa: E402
from attnlab.model.families.gpt2 import convert_gpt2, gpt2_config  # noqa: E402
from attnlab.model.transformer import build_model  # noqa: E402

from tests.hf_fixtures import quiet_transformers  # noqa: E402

transformers = pytest.importorskip("transformers")


def _perturbed(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2():
    quiet_transformers()
    conf = transformers.GPT2Config(vocab_size=30, n_embd=12, n_head=3, n_layer=2, n_positions=16)
    torch.manual_seed(0)
    return _perturbed(transformers.GPT2LMHeadModel(conf))


@pytest.fixture(scope="module")
def bert_mlm():
    quiet_transformers()
    conf = transformers.BertConfig(vocab_size=30, hidden_size=12, num_attention_heads=3, num_hidden_layers=2,
                                   intermediate_size=20, max_position_embeddings=16, type_vocab_size=2)
    torch.manual_seed(0)
    return _perturbed(transformers.BertForMaskedLM(conf))


def _ids(T=9, vocab=30):
    return torch.randint(0, vocab, (1, T), generator=torch.Generator().manual_seed(3))


def _ours(cfg, state):
    model = build_model(cfg)
    load_weights(model, state, "test")
    return model.eval()


# -- GPT-2 -----------------------------------------------------------------------------------------------
def test_gpt2_config_mapping():
    cfg = gpt2_config(dict(vocab_size=50, n_embd=24, n_head=3, n_layer=2, n_positions=40,
                           activation_function="gelu_new", layer_norm_epsilon=1e-5))
    assert (cfg.arch, cfg.norm, cfg.positional, cfg.mlp, cfg.output_head) == ("decoder", "pre", "learned", "gelu_tanh", "lm")
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.max_len, cfg.hidden) == (24, 3, 2, 40, 96)
    assert cfg.tie_embeddings and cfg.norm_eps == 1e-5
    assert gpt2_config(dict(vocab_size=50, n_embd=24, n_head=3, n_layer=2, n_positions=40, n_inner=30,
                            activation_function="gelu")).hidden == 30


@pytest.mark.parametrize("bad, match", [
    (dict(activation_function="silu"), "activation 'silu'"),
    (dict(add_cross_attention=True), "add_cross_attention"),
    (dict(n_head=5), "divisible"),
    (dict(n_layer=None), "lacks n_layer"),
])
def test_gpt2_config_refuses(bad, match):
    base = dict(vocab_size=50, n_embd=24, n_head=3, n_layer=2, n_positions=40)
    with pytest.raises(CheckpointError, match=match):
        gpt2_config({**base, **bad})


@pytest.mark.parametrize("prefixed", [True, False], ids=["GPT2LMHeadModel", "GPT2Model"])
def test_gpt2_converted_equals_transformers(gpt2, prefixed):
    state = gpt2.state_dict() if prefixed else gpt2.transformer.state_dict()
    assert any(k.startswith("transformer.") for k in state) == prefixed
    cfg = gpt2_config(gpt2.config.to_dict())
    ours_state = convert_gpt2(state, cfg)
    model = _ours(cfg, ours_state)
    # Every key of our model (bar the LM head tied to the token embedding) comes from the checkpoint.
    assert set(model.state_dict()) - set(ours_state) == {"lm_head.weight"}
    # Conv1D [in, out] → Linear [out, in].
    assert torch.equal(ours_state["blocks.0.attn.qkv.weight"], state[("transformer." if prefixed else "")
                                                                     + "h.0.attn.c_attn.weight"].t())
    ids = _ids()
    with torch.no_grad():
        ref = gpt2(ids, output_hidden_states=True)
        out = model(ids)
    assert (out.logits - ref.logits).abs().max() <= 1e-4
    assert (out.hidden - ref.hidden_states[-1]).abs().max() <= 1e-4


def test_gpt2_old_buffers_ignored_and_extras_rejected(gpt2):
    cfg = gpt2_config(gpt2.config.to_dict())
    state = dict(gpt2.state_dict())
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 16, 16)  # old causal-mask buffer
    state["transformer.h.1.attn.masked_bias"] = torch.tensor(-1e4)
    convert_gpt2(state, cfg)
    state["transformer.h.2.ln_1.weight"] = torch.ones(12)  # a layer the config does not have
    with pytest.raises(CheckpointError, match=r"unexpected weights h\.2\.ln_1\.weight"):
        convert_gpt2(state, cfg)


def test_gpt2_missing_and_misshaped_keys(gpt2):
    cfg = gpt2_config(gpt2.config.to_dict())
    state = dict(gpt2.state_dict())
    del state["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(CheckpointError, match=r"lacks h\.1\.mlp\.c_fc\.bias"):
        convert_gpt2(state, cfg)
    state = dict(gpt2.state_dict())
    with pytest.raises(CheckpointError, match=r"wpe\.weight has shape \(16, 12\), config\.json needs \(20, 12\)"):
        convert_gpt2(state, cfg.replace(max_len=20))
    with pytest.raises(CheckpointError, match="neither"):
        convert_gpt2({"foo.weight": torch.zeros(1)}, cfg)


def test_gpt2_untied_head():
    quiet_transformers()
    conf = transformers.GPT2Config(vocab_size=30, n_embd=8, n_head=2, n_layer=1, n_positions=8,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = _perturbed(transformers.GPT2LMHeadModel(conf))
    state = hf.state_dict()
    assert not torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    cfg = gpt2_config(conf.to_dict())
    assert not cfg.tie_embeddings
    model = _ours(cfg, convert_gpt2(state, cfg))
    ids = _ids(6)
    with torch.no_grad():
        assert (model(ids).logits - hf(ids).logits).abs().max() <= 1e-4
    del state["lm_head.weight"]
    with pytest.raises(CheckpointError, match="no lm_head.weight"):
        convert_gpt2(state, cfg)


# -- BERT ------------------------------------------------------------------------------------------------
def test_bert_config_mapping():
    hf = dict(vocab_size=30, hidden_size=12, num_attention_heads=3, num_hidden_layers=2, intermediate_size=20,
              max_position_embeddings=16, type_vocab_size=3, layer_norm_eps=1e-12, hidden_act="gelu",
              architectures=["BertModel"])
    cfg = bert_config(hf)
    assert (cfg.arch, cfg.norm, cfg.embed_norm, cfg.type_vocab_size, cfg.mlp) == ("encoder", "post", True, 3, "gelu")
    assert (cfg.max_len, cfg.hidden, cfg.norm_eps, cfg.output_head_kind) == (16, 20, 1e-12, "none")
    assert bert_config({**hf, "architectures": ["BertForMaskedLM"]}).output_head_kind == "mlm"
    assert bert_config(hf, ["cls.predictions.transform.dense.weight"]).output_head_kind == "mlm"
    assert bert_config({**hf, "architectures": ["BertForMaskedLM"]}, []).output_head_kind == "none"  # names win
    with pytest.raises(CheckpointError, match="position_embedding_type='relative_key'"):
        bert_config({**hf, "position_embedding_type": "relative_key"})
    with pytest.raises(CheckpointError, match="is_decoder"):
        bert_config({**hf, "is_decoder": True})


def test_bert_mlm_converted_equals_transformers(bert_mlm):
    state = bert_mlm.state_dict()
    assert has_mlm_head(state) and any(k.startswith("bert.") for k in state)
    cfg = bert_config(bert_mlm.config.to_dict(), list(bert_mlm.state_dict()))
    ours_state = convert_bert(state, cfg)
    model = _ours(cfg, ours_state)
    assert set(model.state_dict()) - set(ours_state) == {"mlm.decoder.weight"}  # tied to embed.tok
    assert cfg.qkv_layout == "split" and "blocks.1.attn.qkv.weight" not in ours_state
    for part, n in zip("qkv", ("query", "key", "value")):  # the file's own tensors: the same storage, no copy
        src = state[f"bert.encoder.layer.1.attention.self.{n}.weight"]
        assert ours_state[f"blocks.1.attn.{part}.weight"].data_ptr() == src.data_ptr()
    ids, tt = _ids(), torch.tensor([[0] * 5 + [1] * 4])
    with torch.no_grad():
        ref = bert_mlm(ids, token_type_ids=tt, output_hidden_states=True)
        out = model(ids, token_type_ids=tt)
    assert (out.logits - ref.logits).abs().max() <= 1e-4
    assert (out.hidden - ref.hidden_states[-1]).abs().max() <= 1e-4


def test_bert_base_unprefixed_pooler_ignored(bert_mlm):
    quiet_transformers()
    torch.manual_seed(1)
    base = _perturbed(transformers.BertModel(bert_mlm.config))  # with a pooler
    state = base.state_dict()
    assert "pooler.dense.weight" in state and not has_mlm_head(state)
    cfg = bert_config(base.config.to_dict(), list(state))
    model = _ours(cfg, convert_bert(state, cfg))
    assert model.mlm is None
    ids = _ids()
    with torch.no_grad():
        assert (model(ids).hidden - base(ids).last_hidden_state).abs().max() <= 1e-4
    # An MLM checkpoint converted as a headless encoder would silently lose the head: refused.
    with pytest.raises(CheckpointError, match="has an MLM head but the config asks for none"):
        convert_bert(bert_mlm.state_dict(), cfg)


def test_bert_gamma_beta_and_errors(bert_mlm):
    cfg = bert_config(bert_mlm.config.to_dict(), list(bert_mlm.state_dict()))
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in bert_mlm.state_dict().items()}
    convert_bert(state, cfg)  # old TF names accepted
    state = dict(bert_mlm.state_dict())
    state["bert.encoder.layer.0.attention.self.key.weight"] = torch.zeros(12, 8)
    with pytest.raises(CheckpointError, match=r"key\.weight has shape \(12, 8\)"):
        convert_bert(state, cfg)
    state = dict(bert_mlm.state_dict())
    state["cls.predictions.decoder.weight"] = torch.zeros(30, 12)
    with pytest.raises(CheckpointError, match="not tied"):
        convert_bert(state, cfg)
    with pytest.raises(CheckpointError, match="lacks encoder.layer.2"):
        convert_bert(bert_mlm.state_dict(), cfg.replace(n_layers=3))


def test_supported_families_named_in_full():
    assert supported_families().split(", ") == list(FAMILIES) and "vit" in FAMILIES
