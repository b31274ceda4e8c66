"""Qwen2 and Qwen2.5 (Qwen2ForCausalLM): Llama's layout with biases on q, k and v (model/families/llama.py)."""

from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.llama import convert_llama, llama_config

FAMILY = Family("qwen2", "Qwen2, Qwen2.5 and other Qwen2ForCausalLM checkpoints", llama_config,
                lambda state, cfg: convert_llama(state, cfg, "qwen2"), fixed("Qwen2ForCausalLM"),
                {"eos": "<|endoftext|>"}, runs_in_transformers=bare_untied)
