"""Hugging Face checkpoints (GPT-2, BERT, Llama, Qwen2, Mistral, Mixtral and ViT families) in our hooked model.

convert.py: pure functions, config dict → ModelConfig and HF state dict → our state dict (GPT-2, BERT).
llama.py:   the same for Llama, Qwen2 (q/k/v biases), Mistral (sliding window), Mixtral (experts: mixtral.py).
vit.py:     the same for ViT (ViTModel, ViTForImageClassification) and its preprocessor_config.json.
load.py:    local folders (safetensors only, sharded too) and hub ids → LoadedModel.
compare.py: ours against `transformers` on the same token ids (a ViT: the same pixels).
"""

SUPPORTED = ("gpt2", "bert", "llama", "qwen2", "mistral", "mixtral", "vit")
