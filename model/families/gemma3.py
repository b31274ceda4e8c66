"""Gemma 3's text models (Gemma3ForCausalLM, model_type gemma3_text: Gemma 3 270M and 1B, the text side of the
larger ones saved alone): Gemma 2 (model/families/gemma2.py) with q and k RMSNorm'd per head ((1 + w) weights, as
every Gemma norm), no soft-capping unless the config asks, five sliding layers in six, and two RoPEs: the local one
(rope_local_base_freq, unscaled) on the sliding layers, the global one (rope_theta, maybe linearly scaled) on the
others — ModelConfig.rope_local_base. A bidirectional Gemma 3 (EmbeddingGemma) is refused."""

from __future__ import annotations

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import build, refuse
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed
from attnlab.model.families.gemma import convert_gemma, gemma_fields
from attnlab.model.families.gemma2 import sliding_layers


def ropes(hf: dict) -> tuple[dict, float]:
    """(the global RoPE's settings as rope_fields reads them, the local base): from rope_parameters' full_attention
    and sliding_attention (transformers ≥ 5), else rope_theta, rope_scaling and rope_local_base_freq."""
    params = hf.get("rope_parameters")
    if not (isinstance(params, dict) and {"full_attention", "sliding_attention"} & set(params)):
        return {"rope_theta": hf["rope_theta"], "rope_scaling": hf.get("rope_scaling")}, float(hf["rope_local_base_freq"])
    full = {"rope_type": "default", "rope_theta": hf["rope_theta"], **(params.get("full_attention") or {})}
    local = {"rope_type": "default", "rope_theta": hf["rope_local_base_freq"], **(params.get("sliding_attention") or {})}
    if local.get("rope_type") != "default" or set(local) - {"rope_type", "rope_theta"}:
        raise CheckpointError(f"gemma3_text: the sliding layers' RoPE {local!r} is not supported (only a plain one)")
    return {"rope_parameters": full}, float(local["rope_theta"])


def gemma3_config(hf: dict, names=None) -> ModelConfig:
    """A Gemma 3 text config.json dict → ModelConfig."""
    hf = with_defaults(hf, "gemma3_text")
    refuse(hf, "gemma3_text", use_bidirectional_attention=(False, False))
    glob, local_base = ropes(hf)
    plain = {k: v for k, v in hf.items() if k not in ("rope_parameters", "rope_scaling", "rope_theta")}
    fields = gemma_fields({**plain, **glob}, "gemma3_text")
    layers = sliding_layers(hf, "gemma3_text", int(hf["sliding_window_pattern"]))
    window = hf.get("sliding_window") if layers else None
    if layers and window is None:
        raise CheckpointError("gemma3_text: layer_types names sliding-attention layers but sliding_window is null")
    return build(**{**fields, "norm": "peri"}, qk_norm=True, attn_scale=float(hf["query_pre_attn_scalar"]) ** -0.5,
                 attn_softcap=hf.get("attn_logit_softcapping"), logit_softcap=hf.get("final_logit_softcapping"),
                 sliding_window=window, sliding_layers=layers if window else None,
                 rope_local_base=local_base if window else None)


FAMILY = Family("gemma3_text", "Gemma 3 text models (Gemma3ForCausalLM: 270M, 1B; local and global RoPE, q/k norms)",
                gemma3_config, lambda state, cfg: convert_gemma(state, cfg, "gemma3_text"),
                fixed("Gemma3ForCausalLM"), {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"})
