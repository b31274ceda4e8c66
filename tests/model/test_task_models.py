"""Task models (…ForSequenceClassification, …ForTokenClassification, …ForQuestionAnswering) read as their authors
read them: an encoder family's loads its encoder, the task head's tensors dropped, at parity with transformers;
a decoder's (its score head instead of the LM head) runs as a transformers view, and compare-hf says so in one
line. Both used to stop after reading every weight with "unexpected weights classifier.weight … (more layers
than the config says)" or "no lm_head.weight". T5's encoder alone (T5EncoderModel) runs as a view too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.cli.main import main
from attnlab.model.hf.cache import has_converter
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.parity import compare_hf

from tests import family_grid as G

pytest.importorskip("transformers")

_ENC = dict(hidden_size=24, num_attention_heads=3, num_hidden_layers=2, intermediate_size=40, max_position_embeddings=40)
_DISTIL = G.TINY["distilbert"][1]
ENCODERS = {
    # name: (model_type, transformers class, config kwargs)
    "bert-sequence": ("bert", "BertForSequenceClassification", dict(_ENC, num_labels=3)),
    "bert-tokens": ("bert", "BertForTokenClassification", dict(_ENC, num_labels=4)),
    "bert-answers": ("bert", "BertForQuestionAnswering", _ENC),
    "roberta-answers": ("roberta", "RobertaForQuestionAnswering", dict(_ENC, type_vocab_size=1)),
    "distilbert-answers": ("distilbert", "DistilBertForQuestionAnswering", _DISTIL),
}
DECODERS = {
    "gpt2-sequence": ("gpt2", "GPT2ForSequenceClassification", dict(G.TINY["gpt2"][1], num_labels=2)),
    "llama-sequence": ("llama", "LlamaForSequenceClassification", dict(G.TINY["llama"][1], num_labels=2)),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    return {n: G.make(root / n, mt, cls, seed=i, **conf)
            for i, (n, (mt, cls, conf)) in enumerate((ENCODERS | DECODERS).items())}


@pytest.mark.parametrize("name", list(ENCODERS))
def test_an_encoders_task_model_is_its_encoder_at_parity(folders, name):
    lm = load_hf_folder(folders[name])
    assert lm.converted and lm.cfg.output_head_kind == "none"
    worst = G.assert_parity(G.parity(folders[name], backends=("eager", "sdpa")))
    assert worst["max_abs_attention"] <= 1e-6 and worst["max_abs_hidden"] <= 1e-5, worst
    report = compare_hf(str(folders[name]), G.TEXT)
    assert report["tokens_equal"] and report["max_abs_attention"] <= 1e-6


@pytest.mark.parametrize("name", list(DECODERS))
def test_a_decoders_task_model_runs_in_transformers(folders, name):
    import transformers

    mt, cls, _ = DECODERS[name]
    lm = load_hf_folder(folders[name])
    assert not lm.converted and not has_converter({"model_type": mt, "architectures": [cls]})
    assert has_converter({"model_type": mt, "architectures": [cls.replace("ForSequenceClassification", "ForCausalLM")]})
    ids = lm.encode(G.TEXT).ids
    run = lm.capture(lm.encode(G.TEXT))
    hf = getattr(transformers, cls).from_pretrained(str(folders[name]), attn_implementation="eager").eval()
    with torch.no_grad():
        want = hf(ids, output_attentions=True).attentions
    for i, a in enumerate(want):  # the view's patterns are transformers' own: the score head's model ran
        np.testing.assert_allclose(run[f"blocks.{i}.attn"].pattern(), a[0].numpy(), atol=1e-6)
    with pytest.raises(InputError, match=f"runs as a transformers view \\({cls} is a task model\\)"):
        compare_hf(str(folders[name]))


def test_compare_hf_says_task_model_in_one_line(folders, capfd):
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(folders["llama-sequence"])]) == 2
    out, err = capfd.readouterr()
    assert err.strip().splitlines() == [
        f"attnlab: error: {folders['llama-sequence']} runs as a transformers view (LlamaForSequenceClassification "
        "is a task model): transformers itself computes its attention, so there is nothing to compare"]
    assert "Traceback" not in out + err and "Loading weights" not in out + err


def test_t5s_encoder_alone_runs_in_transformers(tmp_path, capfd):
    """T5EncoderModel (is_encoder_decoder false: the text encoders of many pipelines) was refused after reading
    its weights ("is_encoder_decoder=False is not supported"); it runs as a view, its patterns transformers'."""
    import transformers

    folder = G.make(tmp_path / "t5enc", "t5", "T5EncoderModel", **dict(G.TINY["t5"][1], is_encoder_decoder=False))
    lm = load_hf_folder(folder)
    assert not lm.converted and lm.arch == "encoder"
    inputs = lm.encode(G.TEXT)
    run = lm.capture(inputs)
    hf = transformers.T5EncoderModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        want = hf(inputs.ids, output_attentions=True).attentions
    assert len(want) == 2
    for i, a in enumerate(want):
        np.testing.assert_allclose(run[f"blocks.{i}.attn"].pattern(), a[0].numpy(), atol=1e-6)
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(folder)]) == 2
    assert "runs as a transformers view (T5EncoderModel is not what the t5 converter reads)" in capfd.readouterr().err


@pytest.mark.parametrize("family, cls, tied", [("llama", "LlamaModel", False), ("mistral", "MistralModel", False),
                                               ("qwen3", "Qwen3Model", True)])
def test_a_bare_decoder_without_its_lm_head_runs_in_transformers(tmp_path, family, cls, tied):
    """LlamaModel / MistralModel (embedding models are often saved so) have no lm_head and untied embeddings: they
    were refused after reading every weight ("no lm_head.weight") and run as views now; a tied one (Qwen3Model
    with tie_word_embeddings) still converts, its head the embeddings, at parity with the LM class."""
    import transformers

    conf = dict(G.TINY[family][1], tie_word_embeddings=tied)
    folder = G.make(tmp_path / cls, family, cls, **conf)
    lm = load_hf_folder(folder)
    assert lm.converted == tied
    if tied:
        assert G.assert_parity(G.parity(folder, backends=("eager",)))["max_abs_logits"] <= 1e-5
        return
    inputs = lm.encode(G.TEXT)
    run = lm.capture(inputs)
    hf = getattr(transformers, cls).from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        want = hf(inputs.ids, output_attentions=True).attentions
    for i, a in enumerate(want):
        np.testing.assert_allclose(run[f"blocks.{i}.attn"].pattern(), a[0].numpy(), atol=1e-6)
