"""Gemma (GemmaForCausalLM): Llama's layout with (1 + w) RMSNorm weights, a GeGLU MLP (tanh-GELU gate), token
embeddings × √d_model, head_dim 256 whatever the width, and a tied LM head.

(1 + w): Gemma stores each RMSNorm weight as an offset from 1 and computes x̂·(1 + w) in float32; ours holds 1 + w
itself (the same float32 number), so the norm is our plain RMSNorm. Gemma 2 (model/families/gemma2.py) adds to this.
"""

from __future__ import annotations

import math

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import State, build
from attnlab.model.families.family import Family, fixed
from attnlab.model.families.llama import convert_llama, decoder_fields

NORMS = (".ln_attn.weight", ".ln_mlp.weight", ".ln_attn_out.weight", ".ln_mlp_out.weight", "ln_f.weight",
         ".attn.q_norm.weight", ".attn.k_norm.weight")  # q_norm, k_norm: Gemma 3's
ACTS = ("gelu_pytorch_tanh", "gelu")  # "gelu": old Gemma configs, meant as the tanh approximation (transformers too)


def gemma_fields(hf: dict, family: str) -> dict:
    """What Gemma and Gemma 2 share over the Llama layout."""
    fields = decoder_fields(hf, family, tied_default=True, acts=ACTS)
    return {**fields, "mlp": "geglu", "embed_scale": math.sqrt(hf["hidden_size"])}


def gemma_config(hf: dict, names=None) -> ModelConfig:
    """A Gemma config.json dict → ModelConfig."""
    return build(**gemma_fields(hf, "gemma"))


def unit_offset(ours: State) -> State:
    """Gemma's RMSNorm weights w → 1 + w (float32, as Gemma computes them)."""
    return {k: (1.0 + v.float()).to(v.dtype) if k.endswith(NORMS) else v for k, v in ours.items()}


def convert_gemma(hf_state: State, cfg: ModelConfig, family: str = "gemma") -> State:
    """GemmaForCausalLM / Gemma2ForCausalLM / Gemma3ForCausalLM tensors → ours (the Llama converter, then the
    norms' 1 + w)."""
    return unit_offset(convert_llama(hf_state, cfg, family))


FAMILY = Family("gemma", "Gemma (GemmaForCausalLM checkpoints)", gemma_config, convert_gemma,
                fixed("GemmaForCausalLM"), {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"})
