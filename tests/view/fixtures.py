"""Tiny random checkpoints of families attnlab does not convert (GPT-J, Falcon, GPTBigCode, MobileBERT, Pegasus), written
with save_pretrained — no downloads."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.hf_fixtures import EOT, bpe_tokenizer, quiet_transformers, word_tokenizer


def _configs(tok_size: int, eot: int) -> dict:
    import transformers as T

    small = dict(vocab_size=tok_size, bos_token_id=eot, eos_token_id=eot)
    return {
        "gptj": (T.GPTJConfig(n_embd=32, n_head=4, n_layer=2, n_positions=64, rotary_dim=4, **small),
                 T.GPTJForCausalLM),
        "falcon": (T.FalconConfig(hidden_size=24, num_attention_heads=3, num_hidden_layers=2, **small),
                   T.FalconForCausalLM),
        "gpt_bigcode": (T.GPTBigCodeConfig(n_embd=24, n_head=2, n_layer=3, n_positions=48, **small),
                        T.GPTBigCodeForCausalLM),
        "mobilebert": (T.MobileBertConfig(vocab_size=tok_size, hidden_size=32, num_attention_heads=4,
                                          num_hidden_layers=2, embedding_size=16, intermediate_size=40,
                                          intra_bottleneck_size=32, true_hidden_size=32, max_position_embeddings=40),
                       T.MobileBertForMaskedLM),
        "pegasus": (T.PegasusConfig(d_model=32, encoder_attention_heads=4, decoder_attention_heads=4,
                                    encoder_layers=2, decoder_layers=2, encoder_ffn_dim=40, decoder_ffn_dim=40,
                                    max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0,
                                    **small), T.PegasusForConditionalGeneration),
    }


FAMILIES = ("gptj", "falcon", "gpt_bigcode", "mobilebert", "pegasus")


def make_view_model(family: str, folder: Path, seed: int = 0) -> Path:
    """A seeded random `family` model saved as safetensors in `folder`, with a tokenizer.json."""
    quiet_transformers()
    bert = family == "mobilebert"
    tok = word_tokenizer(True) if bert else bpe_tokenizer()
    eot = tok.token_to_id("[SEP]" if bert else EOT)
    conf, cls = _configs(tok.get_vocab_size(), eot)[family]
    torch.manual_seed(seed)
    model = cls(conf).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    specials = {"mask_token": "[MASK]", "pad_token": "[PAD]"} if bert else {"bos_token": EOT, "eos_token": EOT}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials))
    return folder


def hf_attentions(folder: Path, ids, src_ids=None):
    """transformers' own attentions for these ids (eager): a tuple per stack, as its output names them."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    cls = getattr(transformers, config.architectures[0])
    model = cls.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        if src_ids is not None:
            out = model(input_ids=torch.tensor([src_ids]), decoder_input_ids=torch.tensor([ids]),
                        output_attentions=True)
            return {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
        return {"self": model(input_ids=torch.tensor([ids]), output_attentions=True).attentions}
