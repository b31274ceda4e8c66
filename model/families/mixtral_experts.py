"""Hugging Face Mixtral checkpoints: the mixture-of-experts parts. Pure functions.

Mixtral is Mistral with each MLP replaced by a sparse MoE block (model/families/llama.py converts the rest):
a bias-free router `gate` [E, D], then softmax over every expert, top-k and the k weights renormalised —
exactly model/moe.py's router — and SwiGLU experts without biases. Two layouts hold the experts:
per expert `block_sparse_moe.experts.{e}.w1` (gate) / `w3` (up) / `w2` (down), as `save_pretrained` writes
them, or fused `mlp.experts.gate_up_proj` [E, 2·I, D] (gate rows first) and `mlp.experts.down_proj`
[E, D, I], as transformers ≥ 5 holds them in memory. No `transformers` import here.
"""

from __future__ import annotations

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper


def mixtral_fields(hf: dict) -> dict:
    """The MoE fields of ModelConfig from a Mixtral config.json dict."""
    n, k = hf.get("num_local_experts"), hf.get("num_experts_per_tok")
    if not isinstance(n, int) or not isinstance(k, int):
        raise CheckpointError("mixtral config.json lacks num_local_experts / num_experts_per_tok")
    return dict(mlp="moe", n_experts=n, top_k=k, expert_mlp="swiglu",
                router_aux_coef=float(hf.get("router_aux_loss_coef", 0.001)))


def take_experts(m: Mapper, h: str, b: str, cfg: ModelConfig) -> None:
    """Layer prefix `h` (e.g. 'layers.0.') of the HF state → our `b` ('blocks.0.') router and experts."""
    D, H, E = cfg.d_model, cfg.hidden, cfg.n_experts
    fused = h + "mlp.experts.gate_up_proj" in m.rest
    moe = h + ("mlp." if fused else "block_sparse_moe.")
    m.take(moe + "gate.weight", b + "mlp.router.weight", (E, D))
    if fused:
        gate_up = m.pop(moe + "experts.gate_up_proj", (E, 2 * H, D))
        down = m.pop(moe + "experts.down_proj", (E, D, H))
    for e in range(E):
        x = f"{b}mlp.experts.{e}."
        if fused:
            m.out[x + "gate.weight"], m.out[x + "up.weight"] = gate_up[e, :H], gate_up[e, H:]  # [H, D] each
            m.out[x + "down.weight"] = down[e]  # [D, H]
        else:
            src = f"{moe}experts.{e}."
            m.take(src + "w1.weight", x + "gate.weight", (H, D))
            m.take(src + "w3.weight", x + "up.weight", (H, D))
            m.take(src + "w2.weight", x + "down.weight", (D, H))
