"""A GGUF file's tokenizer metadata → a `tokenizers` fast tokenizer and its tokenizer_config.json.

The vocabulary, merges and token types are turned into a tokenizer by transformers' own GGUF conversion
(byte-level BPE for `tokenizer.ggml.model` "gpt2", sentencepiece-style BPE for "llama"). The pre-tokenizer
follows llama.cpp's `tokenizer.ggml.pre` where transformers has none: "smollm" (and the other llama.cpp
vocabularies with the same rule) splits every digit on its own before GPT-2's split, as llama.cpp does.
"""

from __future__ import annotations

import numpy as np
from attnlab.model.gguf.reader import GGUFError, GGUFFile

TOKENIZER_KEYS = {  # tokenizer.ggml.KEY → transformers' tokenizer_dict key
    "model": "tokenizer_type", "pre": "pre_tokenizer_type", "tokens": "tokens", "scores": "scores",
    "token_type": "token_type", "merges": "merges", "bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id",
    "unknown_token_id": "unk_token_id", "padding_token_id": "pad_token_id", "add_space_prefix": "add_prefix_space",
}
DIGITS_FIRST = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")  # llama.cpp: "\p{N}" first
SPECIALS = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id"}


def tokenizer_dict(g: GGUFFile) -> dict:
    """The metadata transformers' GGUF tokenizer conversion reads (plain lists, not numpy arrays)."""
    out = {}
    for key, name in TOKENIZER_KEYS.items():
        v = g.metadata.get(f"tokenizer.ggml.{key}")
        if v is not None:
            out[name] = v.tolist() if isinstance(v, np.ndarray) else v
    tokens = out.get("tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise GGUFError(f"{g.path.name}: no tokenizer.ggml.tokens list in its metadata; attnlab needs the vocabulary")
    for key in ("scores", "token_type"):
        if key in out and len(out[key]) != len(tokens):
            raise GGUFError(f"{g.path.name}: tokenizer.ggml.{key} has {len(out[key])} entries for {len(tokens)} tokens")
    if "merges" in out and not all(isinstance(m, str) and m.count(" ") == 1 for m in out["merges"]):
        raise GGUFError(f"{g.path.name}: tokenizer.ggml.merges holds entries that are not 'a b' pairs")
    return out


def build_tokenizer(g: GGUFFile):
    """(tokenizers.Tokenizer, tokenizer_config dict with bos/eos/pad/unk token strings)."""
    d = tokenizer_dict(g)
    if d.get("tokenizer_type") not in ("gpt2", "llama"):
        raise GGUFError(f"{g.path.name}: tokenizer model {d.get('tokenizer_type')!r} is not supported "
                        "(only 'gpt2' byte-level BPE and 'llama' sentencepiece BPE)")
    try:
        tok = _convert(g.architecture, d)
    except Exception as e:  # noqa: BLE001 — transformers raises many kinds; the first line says what
        raise GGUFError(f"{g.path.name}: cannot build its tokenizer ({(str(e).splitlines() or [type(e).__name__])[0]})") from None
    if d.get("pre_tokenizer_type") in DIGITS_FIRST and d["tokenizer_type"] == "gpt2":
        from tokenizers import pre_tokenizers

        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.no_truncation()
    tok.no_padding()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "add_bos_token": bool(g.metadata.get("tokenizer.ggml.add_bos_token", d["tokenizer_type"] == "llama")),
              "model_max_length": int(g.metadata.get(f"{g.architecture}.context_length", 2048))}
    for name, key in SPECIALS.items():
        i = g.metadata.get(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and 0 <= i < len(d["tokens"]):
            config[f"{name}_token"] = d["tokens"][i]
    if isinstance(g.metadata.get("tokenizer.chat_template"), str):
        config["chat_template"] = g.metadata["tokenizer.chat_template"]
    return tok, config


def _convert(architecture: str, d: dict):
    try:  # transformers ≥ 5
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError:  # transformers 4.x
        from transformers.integrations.ggml import convert_gguf_tokenizer
    tok, _ = convert_gguf_tokenizer(architecture, d)
    return tok
