"""A GGUF file's tokenizer metadata → a `tokenizers` fast tokenizer and its tokenizer_config.json.

The vocabulary, merges and token types are turned into a tokenizer by transformers' own GGUF conversion
(byte-level BPE for `tokenizer.ggml.model` "gpt2", sentencepiece-style BPE for "llama"). The pre-tokenizer
follows llama.cpp's `tokenizer.ggml.pre` where transformers has none: "smollm" (and the other llama.cpp
vocabularies with the same rule) splits every digit on its own before GPT-2's split, as llama.cpp does.
BOS and EOS are added as the file's `tokenizer.ggml.add_bos_token` / `add_eos_token` say; a file that says
nothing about BOS gets llama.cpp's default: a sentencepiece vocabulary adds it (transformers too), and so does a
byte-level one whose `tokenizer.ggml.pre` llama.cpp adds it for (Llama 3's "llama-bpe", "tekken" …), which
transformers' GGUF tokenizer leaves out — the model was trained with it, its attention leans on it. A
sentencepiece vocabulary with `tokenizer.ggml.add_space_prefix` false puts no "▁" before the text, as in llama.cpp
(transformers ignores the key). Tokens the conversion adds beyond the file's vocabulary (GPT-2's default
`<|endoftext|>`) are dropped: the model has no embedding for them.
"""

from __future__ import annotations

import json

import numpy as np
from attnlab.model.gguf.reader import GGUFError, GGUFFile

TOKENIZER_KEYS = {  # tokenizer.ggml.KEY → transformers' tokenizer_dict key
    "model": "tokenizer_type", "pre": "pre_tokenizer_type", "tokens": "tokens", "scores": "scores",
    "token_type": "token_type", "merges": "merges", "bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id",
    "unknown_token_id": "unk_token_id", "padding_token_id": "pad_token_id", "add_space_prefix": "add_prefix_space",
}
DIGITS_FIRST = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")  # llama.cpp: "\p{N}" first
BOS_BY_DEFAULT = ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                  "jina-v5-nano", "tekken", "chameleon")  # llama-vocab.cpp: BPE pre types with add_bos = true
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
    if out.get("tokenizer_type") == "gpt2" and "merges" not in out:  # llama.cpp refuses such a file too
        raise GGUFError(f"{g.path.name}: no tokenizer.ggml.merges in its metadata; a byte-level ('gpt2') "
                        "vocabulary needs them")
    if out.get("tokenizer_type") == "llama" and "merges" not in out and "scores" not in out:
        raise GGUFError(f"{g.path.name}: no tokenizer.ggml.scores (nor merges) in its metadata; a sentencepiece "
                        "('llama') vocabulary needs them to order its merges")
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
    if d["tokenizer_type"] == "llama" and d.get("add_prefix_space") is False:
        tok = _without_space_prefix(tok, g.path.name)
    tok = _within_vocabulary(tok, len(d["tokens"]))
    tok.no_truncation()
    tok.no_padding()
    add_bos, add_eos = add_special_flags(g, d["tokenizer_type"])
    for name in ("bos", "eos"):  # a token the file asks to add must be one of its tokens
        i = g.metadata.get(f"tokenizer.ggml.{SPECIALS[name]}")
        if g.metadata.get(f"tokenizer.ggml.add_{name}_token") is True and i is not None and not (
                type(i) is int and 0 <= i < len(d["tokens"])):
            raise GGUFError(f"{g.path.name}: tokenizer.ggml.add_{name}_token is true but tokenizer.ggml."
                            f"{SPECIALS[name]}={i!r} is not one of its {len(d['tokens'])} tokens")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "add_bos_token": bool(add_bos), "add_eos_token": bool(add_eos),
              "model_max_length": int(g.metadata.get(f"{g.architecture}.context_length", 2048))}
    for name, key in SPECIALS.items():
        i = g.metadata.get(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and 0 <= i < len(d["tokens"]):
            config[f"{name}_token"] = d["tokens"][i]
    if add_bos is not None or add_eos is not None:  # transformers rewrites the post-processor only then
        tok.post_processor = bos_eos_template(config.get("bos_token") if add_bos else None,
                                              config.get("eos_token") if add_eos else None, tok)
    if isinstance(g.metadata.get("tokenizer.chat_template"), str):
        config["chat_template"] = g.metadata["tokenizer.chat_template"]
    return tok, config


def add_special_flags(g: GGUFFile, tokenizer_type: str) -> tuple[bool | None, bool | None]:
    """(add BOS, add EOS): the file's flags; without a BOS flag, llama.cpp's default (a sentencepiece ("llama")
    vocabulary adds BOS; a byte-level one adds it for the pre types in BOS_BY_DEFAULT). None: the file says
    nothing (the converted tokenizer's own rule stays)."""
    flags = [g.metadata.get(f"tokenizer.ggml.{k}") for k in ("add_bos_token", "add_eos_token")]
    for key, v in zip(("add_bos_token", "add_eos_token"), flags):
        if v is not None and not isinstance(v, bool):
            raise GGUFError(f"{g.path.name}: tokenizer.ggml.{key}={v!r} is not true or false")
    add_bos, add_eos = flags
    pre = g.metadata.get("tokenizer.ggml.pre")
    if add_bos is None and (tokenizer_type == "llama" or tokenizer_type == "gpt2" and pre in BOS_BY_DEFAULT):
        add_bos = True
    if add_bos is not None or add_eos is not None:
        add_bos, add_eos = bool(add_bos), bool(add_eos)
    return add_bos, add_eos


def bos_eos_template(bos: str | None, eos: str | None, tok):
    """transformers' post-processor for add_bos/add_eos: `bos $A eos` (a pair: `bos $A eos bos $B eos`)."""
    from tokenizers import processors

    single = f"{(bos + ':0 ') if bos else ''}$A:0{(' ' + eos + ':0') if eos else ''}"
    pair = f"{single}{(' ' + bos + ':1') if bos else ''} $B:1{(' ' + eos + ':1') if eos else ''}"
    specials = [(t, tok.token_to_id(t)) for t in (bos, eos) if t]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(dict.fromkeys(specials)))


def _without_space_prefix(tok, name: str):
    """A sentencepiece tokenizer that puts no "▁" before the text (tokenizer.ggml.add_space_prefix false, which
    llama.cpp honours and transformers' GGUF tokenizer ignores), and so strips none from the decoded text."""
    data = json.loads(tok.to_str())
    pre, dec = data.get("pre_tokenizer") or {}, data.get("decoder") or {}
    if pre.get("type") != "Metaspace":
        raise GGUFError(f"{name}: a {pre.get('type')} pre-tokenizer cannot honour tokenizer.ggml.add_space_prefix=false")
    pre["prepend_scheme"] = "never"
    if dec.get("type") == "Sequence":
        dec["decoders"] = [x for x in dec["decoders"] if x.get("type") != "Strip"]
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json.dumps(data))


def _within_vocabulary(tok, n: int):
    """The tokenizer without added tokens whose ids lie past the file's n tokens (no embedding holds them)."""
    data = json.loads(tok.to_str())
    kept = [t for t in data.get("added_tokens") or [] if t["id"] < n]
    if len(kept) == len(data.get("added_tokens") or []):
        return tok
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json.dumps(data | {"added_tokens": kept}))


def _convert(architecture: str, d: dict):
    try:  # transformers ≥ 5
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError:  # transformers 4.x
        from transformers.integrations.ggml import convert_gguf_tokenizer
    tok, _ = convert_gguf_tokenizer(architecture, d)
    return tok
