"""What a Hugging Face folder says about itself: the family its config names (a config asking for its own code
refused) and its tokenizer, read locally. The converted loader (model/hf/load.py), the view (model/view) and the
memory estimate (model/memory.py) all read folders through here."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families import FAMILIES, supported_families
from attnlab.model.parity_inputs import transformers_tokenizer
from attnlab.model.tokenizer import HFTokenizer


def model_family(hf: dict, folder: Path) -> str:
    """The family named by model_type; a config asking for the checkpoint's own code is refused first."""
    if hf.get("auto_map") or hf.get("trust_remote_code"):
        raise CheckpointError(
            f"{folder}: config.json asks for the checkpoint's own Python code (auto_map / trust_remote_code); "
            "attnlab never runs code shipped with a checkpoint. Supported families, through our own code: "
            f"{supported_families()}")
    mt = hf.get("model_type")
    if mt not in FAMILIES:
        raise CheckpointError(
            f"{folder}: model_type {mt!r} is not supported; supported families: {supported_families()}")
    return mt


def read_tokenizer(folder: Path, family: str, cfg: ModelConfig) -> HFTokenizer:
    """The tokenizer transformers gives this folder. A class named in tokenizer_config.json (LlamaTokenizer,
    T5Tokenizer, …): transformers' own backend, which rebuilds that class's pipeline (normalizer, pre-tokenizer)
    around tokenizer.json's vocabulary, so its ids can differ from the file's (Llama's " the": ▁the, not ▁ ▁the);
    else tokenizer.json via `tokenizers` (what transformers reads then); else the vocabulary files through
    transformers' fast tokenizer, locally."""
    specials = _specials(folder, family)
    has_json = (folder / "tokenizer.json").is_file()
    backend = _transformers_backend(folder, required=not has_json) if _names_class(folder) else None
    if backend is not None:
        tok = HFTokenizer(backend, **specials)
    elif has_json:
        try:
            tok = HFTokenizer.from_file(folder / "tokenizer.json", **specials)
        except Exception as e:  # noqa: BLE001 — the Rust error text is the useful part
            raise CheckpointError(f"{folder}/tokenizer.json cannot be read: {e}") from None
    elif any((folder / f).is_file() for f in ("vocab.txt", "vocab.json")):
        tok = HFTokenizer(_transformers_backend(folder, required=True), **specials)
    else:
        raise CheckpointError(f"{folder} has no tokenizer files (tokenizer.json, vocab.txt or vocab.json + merges.txt)")
    # Our encode rejects over-length input with a message; a saved truncation/padding would hide it.
    tok.tok.no_truncation()
    tok.tok.no_padding()
    if tok.vocab_size > cfg.vocab_size:
        raise CheckpointError(
            f"{folder}: the tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size} embeddings")
    return tok


PLAIN_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")  # tokenizer.json read as it is


def _names_class(folder: Path) -> bool:
    """True when tokenizer_config.json names a tokenizer class of its own (one transformers builds itself)."""
    try:
        named = json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(named, str) and bool(named) and named not in PLAIN_CLASSES


def _transformers_backend(folder: Path, required: bool):
    """transformers' tokenizer for the folder (model/parity_inputs.py decides which), as its Rust backend; a
    failure is a CheckpointError when `required`, else None (tokenizer.json is read instead)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        return transformers_tokenizer(folder).backend_tokenizer
    except Exception as e:  # noqa: BLE001
        if not required:
            return None
        raise CheckpointError(f"{folder}: cannot build a tokenizer from its vocabulary files: {e}") from None


def _specials(folder: Path, family: str) -> dict[str, str]:
    """bos/eos/pad/mask/unk token strings from special_tokens_map.json / tokenizer_config.json, else defaults."""
    found: dict[str, str] = {}
    for fname in ("tokenizer_config.json", "special_tokens_map.json"):  # the later file wins
        path = folder / fname
        if not path.is_file():
            continue
        try:
            d = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        for ours in ("bos", "eos", "pad", "mask", "unk"):
            v = d.get(f"{ours}_token")
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str):
                found[ours] = v
    return {**(FAMILIES[family].specials if family in FAMILIES else {}), **found}  # a view: the folder's own

