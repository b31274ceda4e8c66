"""The built-in steps' builders by name: a tour file's step {"builtin": name} is built by BUILDERS[name]."""

from __future__ import annotations

from attnlab.app.tour import beyond, compute, look, parts, running, seeing, sinks

BUILDERS = {
    "why-attention": look.why_attention, "query-key-value": compute.query_key_value,
    "scaled-dot-product": compute.scaled_dot_product, "masks": compute.masks, "permutation": compute.permutation,
    "multi-head": look.multi_head, "positions": parts.positions, "block": parts.block,
    "architectures": parts.architectures, "kv-cache": running.kv_cache, "flash": running.flash,
    "explanation": look.explanation, "vit": seeing.vit, "moe": seeing.moe, "real-english": beyond.real_english,
    "logit-lens": beyond.logit_lens, "patching": beyond.patching, "sinks": sinks.sinks,
}
