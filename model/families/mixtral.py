"""Mixtral (MixtralForCausalLM): Mistral with mixture-of-experts MLPs (model/families/mixtral_experts.py)."""

from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.llama import convert_llama, llama_config

FAMILY = Family("mixtral", "Mixtral and other MixtralForCausalLM mixture-of-experts checkpoints", llama_config,
                lambda state, cfg: convert_llama(state, cfg, "mixtral"), fixed("MixtralForCausalLM"),
                {"bos": "<s>", "eos": "</s>"}, runs_in_transformers=bare_untied)
