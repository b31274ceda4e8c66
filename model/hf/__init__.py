"""Hugging Face checkpoints (GPT-2, BERT, Llama, Qwen2, Mistral and Mixtral families) in our hooked model.

convert.py: pure functions, config dict → ModelConfig and HF state dict → our state dict (GPT-2, BERT).
llama.py:   the same for Llama, Qwen2 (q/k/v biases), Mistral (sliding window), Mixtral (experts: mixtral.py).
load.py:    local folders (safetensors only, sharded too) and hub ids → LoadedModel.
compare.py: ours against `transformers` on the same token ids.
"""

SUPPORTED = ("gpt2", "bert", "llama", "qwen2", "mistral", "mixtral")
