"""The table of Hugging Face families we convert into our hooked model: one module per family, one row each.

A row (`Family`) says how a `model_type`'s config.json becomes our ModelConfig, how its tensors become our
state dict (every tensor consumed or knowingly ignored), its default special tokens and the transformers class
that parity (model/parity.py) compares it with. Loading (model/hf/load.py), memory estimates (model/memory.py),
the hub cache listing, parity and the docs (`attnlab families`) read this table; adding a family is one new
module and one row below.
"""

from __future__ import annotations

from attnlab.model.families import (
    albert,
    bart,
    bert,
    bloom,
    clip,
    clip_vision_model,
    deit,
    distilbert,
    electra,
    gemma,
    gemma2,
    gemma3,
    gpt2,
    gpt_neo,
    gpt_neox,
    llama,
    marian,
    mistral,
    mixtral,
    opt,
    phi,
    phi3,
    qwen2,
    qwen3,
    roberta,
    t5,
    vit,
    xlm_roberta,
)
from attnlab.model.families.family import Family, fixed

__all__ = ["FAMILIES", "Family", "fixed", "supported_families"]

ROWS = (gpt2.FAMILY, bert.FAMILY, llama.FAMILY, qwen2.FAMILY, mistral.FAMILY, mixtral.FAMILY, vit.FAMILY,
        qwen3.FAMILY, gemma.FAMILY, gemma2.FAMILY, gemma3.FAMILY, phi3.FAMILY, phi.FAMILY, gpt_neox.FAMILY,
        gpt_neo.FAMILY, opt.FAMILY, bloom.FAMILY)
ROWS += (roberta.FAMILY, xlm_roberta.FAMILY, distilbert.FAMILY, electra.FAMILY, albert.FAMILY, t5.FAMILY,
         bart.FAMILY, marian.FAMILY, deit.FAMILY, clip.FAMILY, clip_vision_model.FAMILY)
FAMILIES: dict[str, Family] = {f.model_type: f for f in ROWS}


def supported_families() -> str:
    """Every supported model_type, in full (what a refusal lists)."""
    return ", ".join(FAMILIES)

