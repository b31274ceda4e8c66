"""Hugging Face checkpoints (GPT-2 and BERT families) in our hooked model.

convert.py: pure functions, config dict → ModelConfig and HF state dict → our state dict.
load.py:    local folders (safetensors only) and hub ids → LoadedModel.
compare.py: ours against `transformers` on the same token ids.
"""

SUPPORTED = ("gpt2", "bert")
