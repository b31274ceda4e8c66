"""A checkpoint's RoPE settings → our ModelConfig fields (rope_base, rotary_dim, rope_scaling …). Pure functions.

Read from `rope_parameters` (transformers ≥ 5) or the older `rope_theta` / `rope_scaling` / `partial_rotary_factor`
(GPT-NeoX: `rotary_pct`, `rotary_emb_base`). Plain, linear, llama3, yarn and longrope RoPE convert (yarn's and
longrope's attention factor worked out here, as transformers does); dynamic NTK is refused with the reason (it
rescales by the input's length, so a cached run and a full run would differ).
"""

from __future__ import annotations

import math

from attnlab.model.checkpoint import CheckpointError

KEYS = {"default": set(), "linear": {"factor"},
        "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
        "yarn": {"original_max_position_embeddings"}, "longrope": {"short_factor", "long_factor",
                                                                    "original_max_position_embeddings"}}
OPTIONAL = {"yarn": {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"},
            "longrope": {"factor", "attention_factor"}}
COMMON = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
WHY_NOT = {"dynamic": "dynamic NTK rescales by the input's length, so a cached and a full run would differ"}


def rope_fields(hf: dict, family: str, head_dim: int) -> dict:
    """rope_base, and rotary_dim / rope_scaling / rope_factor / … where the checkpoint asks for them."""
    params = hf.get("rope_parameters")
    if params is None:
        params = dict(hf.get("rope_scaling") or {})
    elif not isinstance(params, dict):
        raise CheckpointError(f"{family}: rope_parameters={params!r} is not a dict")
    if not isinstance(params, dict):
        raise CheckpointError(f"{family}: rope_scaling={params!r} is not a dict")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in KEYS:
        why = WHY_NOT.get(kind, "not implemented")
        raise CheckpointError(f"{family}: RoPE scaling {kind!r} is not supported ({why}); default, linear, "
                              "llama3, yarn and longrope are")
    if kind in ("yarn", "longrope") and "original_max_position_embeddings" in hf:  # Phi-3 keeps it at the top
        params = {"original_max_position_embeddings": hf["original_max_position_embeddings"]} | params
    extra = sorted(set(params) - COMMON - KEYS[kind] - OPTIONAL.get(kind, set()))
    missing = sorted(KEYS[kind] - set(params))
    if extra or missing:
        raise CheckpointError(f"{family}: RoPE settings {params!r} are not supported (unknown {extra}, "
                              f"missing {missing} for rope_type {kind!r})")
    theta = params.get("rope_theta", hf.get("rope_theta", hf.get("rotary_emb_base", 10000.0)))
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", hf.get("rotary_pct", 1.0)))
    out = {"rope_base": float(theta)}
    rot = int(head_dim * float(partial))  # as transformers: int(head_dim · partial_rotary_factor)
    if rot != head_dim:
        out["rotary_dim"] = rot
    if kind in ("linear", "llama3"):
        out.update(rope_scaling=kind, rope_factor=float(params["factor"]))
    if kind == "llama3":
        out.update(rope_low_freq=float(params["low_freq_factor"]), rope_high_freq=float(params["high_freq_factor"]),
                   rope_original_len=int(params["original_max_position_embeddings"]))
    if kind in ("yarn", "longrope"):
        out.update(scaled_fields(kind, params, hf))
    return out


def scaled_fields(kind: str, params: dict, hf: dict) -> dict:
    """yarn's or longrope's fields: factor (else max_position_embeddings / original), the attention factor on cos
    and sin (given, else from the factor: transformers' formulas), yarn's ramp, longrope's two factor lists."""
    original = int(params["original_max_position_embeddings"])
    factor = params.get("factor")
    factor = float(factor) if factor is not None else hf["max_position_embeddings"] / original
    attn = params.get("attention_factor")
    if kind == "longrope":
        if attn is None:
            attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        return dict(rope_scaling=kind, rope_factor=factor, rope_original_len=original, rope_attn_factor=float(attn),
                    rope_short=tuple(map(float, params["short_factor"])),
                    rope_long=tuple(map(float, params["long_factor"])))

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attn is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attn = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    return dict(rope_scaling=kind, rope_factor=factor, rope_original_len=original, rope_attn_factor=float(attn),
                rope_beta=(float(params.get("beta_fast") or 32), float(params.get("beta_slow") or 1)),
                rope_truncate=bool(params.get("truncate", True)))
