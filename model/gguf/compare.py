"""A GGUF model in ours against transformers' own GGUF loader (`from_pretrained(dir, gguf_file=...)`), which
dequantises the file itself: the same numbers model/parity.py reports for a Hugging Face folder."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch
from attnlab.model.gguf.convert import CLASSES
from attnlab.model.gguf.reader import read_gguf
from attnlab.model.gguf.smollm2 import NAME as SMOLLM2
from attnlab.model.gguf.tokenizer import BOS_BY_DEFAULT
from attnlab.model.inputs import InputError
from attnlab.model.parity import DEFAULT_TEXT, GREEDY_TOKENS, compare_models
from attnlab.model.parity_inputs import token_report
from attnlab.model.registry import load


def is_gguf(name_or_path: str) -> bool:
    return name_or_path == SMOLLM2 or Path(name_or_path).suffix.lower() == ".gguf"


def load_transformers_gguf(lm):
    """The same GGUF file through transformers (eager attention, float32, local files only)."""
    path = lm.card.get("gguf_path")
    if path is None or lm.family not in CLASSES:
        raise InputError(f"{lm.name} was not loaded from a GGUF file; nothing to compare with")
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    path = Path(path)
    cls = getattr(transformers, CLASSES[lm.family])
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its dequantisation progress bar
            model = cls.from_pretrained(str(path.parent), gguf_file=path.name, attn_implementation="eager",
                                        dtype=torch.float32, local_files_only=True)
    except ImportError as e:  # transformers' GGUF loader needs the `gguf` (and on some versions `accelerate`) package
        raise InputError(f"transformers cannot read GGUF files here: {e}") from None
    except Exception as e:  # noqa: BLE001 — its loader raises many kinds (an architecture gguf-py lacks, a shape)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"transformers' GGUF loader cannot load {path.name} ({type(e).__name__}: {first}); "
                         "nothing to compare with") from None
    return model.eval()


def compare_gguf(name_or_path: str, text: str | None = None, *, backend: str = "eager",
                 greedy_tokens: int | None = None) -> dict:
    """compare_models (model/parity.py) of our load of a GGUF file against transformers' load of it, and the text
    tokenized on each side (ours; transformers' GGUF tokenizer). Both in float32 (transformers dequantises to it).
    """
    lm = load(name_or_path, dtype=torch.float32)
    hf = load_transformers_gguf(lm)
    text = text if text is not None else DEFAULT_TEXT
    inputs = lm.encode(text)
    path = Path(lm.card["gguf_path"])
    with contextlib.redirect_stderr(io.StringIO()):
        tokens = token_report(inputs.ids[0].tolist(), path.parent, text, gguf_file=path.name)
    return compare_models(lm, hf, inputs, backend=backend, greedy_tokens=greedy_tokens or GREEDY_TOKENS) | tokens \
        | llama_cpp_note(path, tokens)


def llama_cpp_note(path: Path, tokens: dict) -> dict:
    """{"tokens_note"} when the ids differ where ours follow llama.cpp and transformers' GGUF tokenizer does not
    (model/gguf/tokenizer.py): the BOS llama.cpp adds for this file's tokenizer.ggml.pre without an add_bos_token
    flag, or no "▁" before the text for a sentencepiece vocabulary with add_space_prefix false."""
    d, meta = tokens.get("first_token_difference"), read_gguf(path).metadata
    pre = meta.get("tokenizer.ggml.pre")
    if d is None:
        return {}
    if (d["position"] == 0 and d["ours"] == meta.get("tokenizer.ggml.bos_token_id") and pre in BOS_BY_DEFAULT
            and "tokenizer.ggml.add_bos_token" not in meta):
        return {"tokens_note": f"ours starts with BOS, which llama.cpp adds for tokenizer.ggml.pre {pre!r} when the "
                               "file has no add_bos_token flag; transformers' GGUF tokenizer leaves it out"}
    if meta.get("tokenizer.ggml.model") == "llama" and meta.get("tokenizer.ggml.add_space_prefix") is False:
        return {"tokens_note": "ours puts no '▁' before the text, as llama.cpp does for tokenizer.ggml."
                               "add_space_prefix=false; transformers' GGUF tokenizer ignores that key"}
    return {}
