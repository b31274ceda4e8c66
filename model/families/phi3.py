"""Phi-3 (Phi3ForCausalLM): Llama's layout with q, k, v fused in one qkv_proj (rows q | k | v, as ours) and gate,
up fused in gate_up_proj (gate rows first); a sliding window when the config sets one; partial rotary when
rope_parameters asks; longrope (Phi-3 128k) through model/families/rope_params.py and model/rope.py."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import State, build, shaped, strip
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, bare_untied, fixed
from attnlab.model.families.llama import convert_llama, decoder_fields


def phi3_config(hf: dict, names=None) -> ModelConfig:
    """A Phi-3 config.json dict → ModelConfig."""
    hf = with_defaults(hf, "phi3")
    return build(**decoder_fields(hf, "phi3"), sliding_window=hf.get("sliding_window"))


def unfuse(hf_state: State, cfg: ModelConfig) -> State:
    """qkv_proj [d_q + 2·d_kv, D] → q_proj, k_proj, v_proj; gate_up_proj [2·H, D] → gate_proj, up_proj (Llama's
    names, so the Llama converter checks every other tensor)."""
    s = strip(hf_state, "model.", "embed_tokens.weight")
    D, H, d_q, d_kv = cfg.d_model, cfg.hidden, cfg.d_attn, cfg.kv_heads * cfg.d_head
    out = {}
    for key, t in s.items():
        if key.endswith("self_attn.qkv_proj.weight"):
            a = key[: -len("qkv_proj.weight")]
            q, k, v = shaped(t, (d_q + 2 * d_kv, D), key, "phi3").split([d_q, d_kv, d_kv])  # rows q | k | v
            out |= {a + "q_proj.weight": q, a + "k_proj.weight": k, a + "v_proj.weight": v}
        elif key.endswith("mlp.gate_up_proj.weight"):
            m = key[: -len("gate_up_proj.weight")]
            gate, up = shaped(t, (2 * H, D), key, "phi3").split([H, H])  # rows gate | up
            out |= {m + "gate_proj.weight": gate, m + "up_proj.weight": up}
        else:
            out[key] = t
    return out


FAMILY = Family("phi3", "Phi-3 and Phi-3.5 mini (Phi3ForCausalLM checkpoints, the longrope 128k ones too)",
                phi3_config, lambda state, cfg: convert_llama(unfuse(state, cfg), cfg, "phi3"),
                fixed("Phi3ForCausalLM"), {"bos": "<s>", "eos": "<|endoftext|>"}, runs_in_transformers=bare_untied)
