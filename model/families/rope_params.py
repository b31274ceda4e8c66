"""A checkpoint's RoPE settings → our ModelConfig fields (rope_base, rotary_dim, rope_scaling …). Pure functions.

Read from `rope_parameters` (transformers ≥ 5) or the older `rope_theta` / `rope_scaling` / `partial_rotary_factor`
(GPT-NeoX: `rotary_pct`, `rotary_emb_base`). Plain, linear and llama3 RoPE convert; any other kind is refused with
the reason (dynamic NTK rescales by the input's length, so a cached run and a full run would differ; yarn and
longrope scale the angles' magnitudes too).
"""

from __future__ import annotations

from attnlab.model.checkpoint import CheckpointError

KEYS = {"default": set(), "linear": {"factor"},
        "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}}
COMMON = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
WHY_NOT = {"dynamic": "dynamic NTK rescales by the input's length, so a cached and a full run would differ",
           "yarn": "yarn also scales the angles' magnitudes", "longrope": "longrope also scales the angles' magnitudes"}


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
        raise CheckpointError(f"{family}: RoPE scaling {kind!r} is not supported ({why}); default, linear and "
                              "llama3 are")
    extra = sorted(set(params) - COMMON - KEYS[kind])
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
    if kind != "default":
        out.update(rope_scaling=kind, rope_factor=float(params["factor"]))
    if kind == "llama3":
        out.update(rope_low_freq=float(params["low_freq_factor"]), rope_high_freq=float(params["high_freq_factor"]),
                   rope_original_len=int(params["original_max_position_embeddings"]))
    return out
