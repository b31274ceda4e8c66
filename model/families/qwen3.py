"""Qwen3 (Qwen3ForCausalLM): Llama's layout with an RMSNorm over each head's q and k before RoPE, and a head_dim
that need not be hidden_size / heads (model/families/llama.py converts it)."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import build
from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.llama import convert_llama, decoder_fields, qwen_windows


def qwen3_config(hf: dict, names=None) -> ModelConfig:
    """A Qwen3 config.json dict → ModelConfig (qk_norm: RMSNorm over d_head, eps rms_norm_eps)."""
    return build(**decoder_fields(hf, "qwen3"), **qwen_windows(hf, "qwen3"), qk_norm=True)


FAMILY = Family("qwen3", "Qwen3 dense models (Qwen3ForCausalLM checkpoints)", qwen3_config,
                lambda state, cfg: convert_llama(state, cfg, "qwen3"), fixed("Qwen3ForCausalLM"),
                {"eos": "<|endoftext|>"}, runs_in_transformers=bare_untied)
