"""Tiny random Hugging Face checkpoints written with `save_pretrained` — no downloads.

Every parameter is perturbed away from its initial value (LayerNorm weights 1, biases 0) so that a
swapped or missed tensor shows up as a numeric difference.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

EOT = "<|endoftext|>"
CORPUS = [
    "the cat sat on the mat because the mat was warm",
    "a dog ran in the park and the cat watched the dog",
    "attention is what the model pays to the tokens it reads",
]
WORDS = sorted({w for line in CORPUS for w in line.split()})


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def bpe_tokenizer(vocab_size: int = 300):
    """A byte-level BPE like GPT-2's (ASCII merges only, so 'é' splits into two byte tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def word_tokenizer(bert: bool):
    """A word-level tokenizer over CORPUS; BERT-style specials and [CLS] A [SEP] (B [SEP]) templates."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] if bert else [EOT, "[UNK]"]
    vocab = {t: i for i, t in enumerate(specials + WORDS + [".", ","])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit() if not bert else pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(specials)
    if bert:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tok


def _perturb(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)


def _save_causal(model_cls, conf, folder: Path, tokenizer, seed: int) -> Path:
    """A seeded random causal LM of `model_cls(conf)`, perturbed, saved as safetensors with its tokenizer."""
    torch.manual_seed(seed)
    model = model_cls(conf).eval()
    _perturb(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": EOT, "eos_token": EOT}))
    return folder


def make_gpt2(folder: Path, tokenizer, seed: int = 0, **cfg) -> Path:
    """GPT2LMHeadModel with a random GPT2Config(**cfg), saved as safetensors + tokenizer.json."""
    from transformers import GPT2Config, GPT2LMHeadModel

    quiet_transformers()
    n_vocab = tokenizer.get_vocab_size()
    eot = tokenizer.token_to_id(EOT)
    conf = GPT2Config(**{"vocab_size": n_vocab, "bos_token_id": eot, "eos_token_id": eot, **cfg})
    return _save_causal(GPT2LMHeadModel, conf, folder, tokenizer, seed)


def make_bert(folder: Path, tokenizer, mlm: bool, seed: int = 0, **cfg) -> Path:
    """BertForMaskedLM (mlm) or BertModel (with pooler) with a random BertConfig(**cfg)."""
    from transformers import BertConfig, BertForMaskedLM, BertModel

    quiet_transformers()
    conf = BertConfig(**{"vocab_size": tokenizer.get_vocab_size(), **cfg})
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm else BertModel)(conf).eval()
    _perturb(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": "[PAD]", "mask_token": "[MASK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}))
    return folder


LLAMA_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
                 "mistral": ("MistralConfig", "MistralForCausalLM")}


def make_llama(folder: Path, tokenizer, family: str, seed: int = 0, **cfg) -> Path:
    """LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM with a random config, saved as safetensors."""
    import transformers

    quiet_transformers()
    conf_cls, model_cls = (getattr(transformers, n) for n in LLAMA_CLASSES[family])
    eot = tokenizer.token_to_id(EOT)
    conf = conf_cls(**{"vocab_size": tokenizer.get_vocab_size(), "bos_token_id": eot, "eos_token_id": eot, **cfg})
    return _save_causal(model_cls, conf, folder, tokenizer, seed)


GPT2_SHAPES = {
    # name: (tokenizer, GPT2Config kwargs)
    "gpt2-3heads-bpe": ("bpe", dict(n_embd=24, n_head=3, n_layer=2, n_positions=40)),
    "gpt2-5heads-ctx12-words": ("words", dict(n_embd=20, n_head=5, n_layer=1, n_positions=12, n_inner=28,
                                               activation_function="gelu", layer_norm_epsilon=1e-6)),
    "gpt2-untied-1head": ("words", dict(n_embd=8, n_head=1, n_layer=3, n_positions=32, tie_word_embeddings=False)),
}
BERT_SHAPES = {
    # name: (mlm head?, BertConfig kwargs)
    "bert-mlm-3heads": (True, dict(hidden_size=24, num_attention_heads=3, num_hidden_layers=2,
                                   intermediate_size=40, max_position_embeddings=32)),
    "bert-base-5heads-ctx12": (False, dict(hidden_size=20, num_attention_heads=5, num_hidden_layers=1,
                                           intermediate_size=28, max_position_embeddings=12, type_vocab_size=3,
                                           hidden_act="gelu_new", layer_norm_eps=1e-7)),
}


_LLAMA = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, max_position_embeddings=64)
LLAMA_SHAPES = {
    # name: (family, config kwargs); GQA ratio = num_attention_heads / num_key_value_heads
    "llama-mha-untied": ("llama", dict(_LLAMA, num_attention_heads=4, num_key_value_heads=4)),
    "llama-gqa2-tied-theta": ("llama", dict(_LLAMA, num_attention_heads=4, num_key_value_heads=2,
                                            tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                                                                                       "rope_theta": 500.0})),
    "qwen2-gqa4-bias-tied": ("qwen2", dict(_LLAMA, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=3,
                                           tie_word_embeddings=True, rms_norm_eps=1e-5)),
    "qwen2-mqa-bias": ("qwen2", dict(_LLAMA, hidden_size=24, num_attention_heads=3, num_key_value_heads=1)),
    "mistral-window5-mqa": ("mistral", dict(_LLAMA, num_attention_heads=4, num_key_value_heads=1, sliding_window=5)),
    "mistral-window3-gqa2": ("mistral", dict(_LLAMA, num_attention_heads=8, num_key_value_heads=4, sliding_window=3,
                                             num_hidden_layers=1, tie_word_embeddings=True)),
}


def build(kind: str, name: str, root: Path) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "llama":
        family, cfg = LLAMA_SHAPES[name]
        return make_llama(folder, bpe_tokenizer(), family, **cfg)
    if kind == "gpt2":
        tok_kind, cfg = GPT2_SHAPES[name]
        return make_gpt2(folder, bpe_tokenizer() if tok_kind == "bpe" else word_tokenizer(False), **cfg)
    mlm, cfg = BERT_SHAPES[name]
    return make_bert(folder, word_tokenizer(True), mlm, **cfg)
