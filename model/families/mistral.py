"""Mistral (MistralForCausalLM): Llama's layout with a sliding window (model/families/llama.py)."""

from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.llama import convert_llama, llama_config

FAMILY = Family("mistral", "Mistral and other MistralForCausalLM checkpoints, sliding window included", llama_config,
                lambda state, cfg: convert_llama(state, cfg, "mistral"), fixed("MistralForCausalLM"),
                {"bos": "<s>", "eos": "</s>"}, runs_in_transformers=bare_untied)
