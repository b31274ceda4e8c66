"""What a config.json means by leaving a key out: transformers fills in its config class's default, and for these
keys and families that default is not the one the shared readers assume (Llama's rms_norm_eps 1e-6, rope_theta
10000, full rotary, no soft-cap, no window, unscaled embeddings). Older checkpoints omit keys their transformers
version did not yet write, so each default is transformers' own (its configuration_*.py), read in one place."""

from __future__ import annotations

DEFAULTS: dict[str, dict] = {
    "mistral": {"sliding_window": 4096},
    "mixtral": {"rope_theta": 1e6, "rms_norm_eps": 1e-5},
    "phi3": {"rms_norm_eps": 1e-5},
    "phi": {"partial_rotary_factor": 0.5},
    "gpt_neox": {"rotary_pct": 0.25},
    "bloom": {"layer_norm_epsilon": 1e-5},
    "gpt_neo": {"window_size": 256, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5},  # read after partial_rotary_factor, as GPT-NeoX's older key
    "gemma2": {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096,
               "query_pre_attn_scalar": 256},
    "gemma3_text": {"sliding_window": 4096, "query_pre_attn_scalar": 256, "rope_theta": 1e6,
                    "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6},
    "marian": {"scale_embedding": False},
    "t5": {"d_kv": 64},  # not d_model / num_heads
}


def with_defaults(hf: dict, family: str) -> dict:
    """config.json with transformers' default for each key of DEFAULTS it leaves out (a key set to null stays)."""
    return {**DEFAULTS.get(family, {}), **hf}
