"""Gemma 2 (Gemma2ForCausalLM): Gemma (model/families/gemma.py) with sandwich norms (a norm before and after each
sub-layer: our norm "peri"), scores scaled by query_pre_attn_scalar^-½, scores soft-capped cap·tanh(s/cap) before
the mask, final logits soft-capped too, and a sliding window on the layers layer_types names (every other layer,
starting with the first, when it names none)."""

from __future__ import annotations

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import build
from attnlab.model.families.defaults import with_defaults
from attnlab.model.families.family import Family, fixed
from attnlab.model.families.gemma import convert_gemma, gemma_fields


def sliding_layers(hf: dict, family: str = "gemma2", pattern: int = 2) -> tuple[int, ...]:
    """The layers with the sliding window: layer_types' "sliding_attention" ones (else every layer but each
    `pattern`-th: Gemma 2's even layers, Gemma 3's five of six)."""
    n = hf["num_hidden_layers"]
    types = hf.get("layer_types") or ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if len(types) != n or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise CheckpointError(f"{family}: layer_types={types!r} must name full_attention or sliding_attention "
                              f"for each of the {n} layers")
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def gemma2_config(hf: dict, names=None) -> ModelConfig:
    """A Gemma 2 config.json dict → ModelConfig."""
    hf = with_defaults(hf, "gemma2")
    fields = gemma_fields(hf, "gemma2")
    layers = sliding_layers(hf)
    window = hf.get("sliding_window") if layers else None
    if layers and window is None:
        raise CheckpointError("gemma2: layer_types names sliding-attention layers but sliding_window is null")
    scalar = hf["query_pre_attn_scalar"]
    return build(**{**fields, "norm": "peri"}, attn_scale=float(scalar) ** -0.5,
                 attn_softcap=hf.get("attn_logit_softcapping"), logit_softcap=hf.get("final_logit_softcapping"),
                 sliding_window=window, sliding_layers=layers if window else None)


FAMILY = Family("gemma2", "Gemma 2 (Gemma2ForCausalLM checkpoints): soft-capping, sandwich norms, local/global layers",
                gemma2_config, lambda state, cfg: convert_gemma(state, cfg, "gemma2"), fixed("Gemma2ForCausalLM"),
                {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"})
